# Cross build for 64-bit ARM Linux with Debian's aarch64 toolchain (crossbuild-essential-arm64)
# against Debian's multiarch arm64 libraries (/usr/lib/aarch64-linux-gnu). Host tools (protoc,
# grpc_cpp_plugin) stay the build machine's. scripts/cross_arm64.sh sets everything up.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(PKG_CONFIG_EXECUTABLE aarch64-linux-gnu-pkg-config CACHE FILEPATH "")
# Programs from the build machine; libraries, headers and packages for the target only.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
# Tests and tools run under qemu-user (scripts/cross_arm64.sh).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
