// Included by every header of the C++ API. The API passes std::string and std::vector (Problem,
// NcclFileBootstrap, Error) by reference through functions whose mangled names do not name them:
// a program built with libstdc++'s old string ABI (PyTorch wheels before 2.7 set
// _GLIBCXX_USE_CXX11_ABI=0 for extensions) would link and then misread every field. Such a
// program uses the C ABI (cpgen/cpgen_c.h), which has no C++ types.
#pragma once

#include <string>  // libstdc++'s headers define _GLIBCXX_USE_CXX11_ABI

#if defined(_GLIBCXX_USE_CXX11_ABI) && !_GLIBCXX_USE_CXX11_ABI
#error "cpgen's C++ API needs libstdc++'s C++11 ABI (_GLIBCXX_USE_CXX11_ABI=1); include cpgen/cpgen_c.h instead"
#endif
