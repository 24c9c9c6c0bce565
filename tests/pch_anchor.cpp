// The target that builds tests/pch.h once for every test program (tests/CMakeLists.txt).
