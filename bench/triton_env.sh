# Sourced by the Triton comparison scripts: makes .venv-triton (PyPI's nvidia-pytriton, which ships a
# real tritonserver with the Python backend) and sets TRITON_HOME, TRITON_LIBS and TRITON_VERSION.
if [ ! -x .venv-triton/bin/python ]; then
  python3 -m venv .venv-triton
  .venv-triton/bin/python -m pip install -q nvidia-pytriton
fi
TRITON_SITE=$(.venv-triton/bin/python -c 'import pytriton, os; print(os.path.dirname(os.path.dirname(pytriton.__file__)))')
TRITON_HOME="$TRITON_SITE/pytriton/tritonserver"
TRITON_LIBS="$TRITON_SITE/nvidia_pytriton.libs"
TRITON_VERSION=$(.venv-triton/bin/python -c 'import importlib.metadata as m; print(m.version("nvidia-pytriton"))')
