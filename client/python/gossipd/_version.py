# The package's version: the project's (CMakeLists.txt, project(gossipd VERSION ...)).
# tests/client/python_package_test.py fails when the two differ.
__version__ = "0.1.0"
