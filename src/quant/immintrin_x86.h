// <immintrin.h> for the files compiled with AVX-512 flags. GCC 12's AVX-512 headers initialise their
// "undefined" vectors from themselves, which its own -Wuninitialized then reports at every use (GCC
// bug 105593, fixed in GCC 13): the warning is silenced for the header only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
