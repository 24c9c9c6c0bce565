// The program that builds tests/pch.h once for every test program (tests/CMakeLists.txt); it
// is never run.
int main() { return 0; }
