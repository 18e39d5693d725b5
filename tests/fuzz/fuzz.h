/*
 * The fuzzing targets' one entry point, as libFuzzer calls it; replay.c
 * calls it too, on the seed corpus, in builds without libFuzzer.
 */
#ifndef EMBER_FUZZ_H
#define EMBER_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int	LLVMFuzzerTestOneInput(const uint8_t *, size_t);

#endif
