// SLUICE_CPU_CLONES: a hot function compiled twice, for x86-64-v3 (AVX2, FMA, BMI2) and for the
// file's baseline (x86-64-v2), GCC choosing one when the program loads (an ifunc resolved by the CPU
// it runs on), so one binary runs on every x86-64 CPU and uses the newer encodings where they exist.
// On the picker's decision (64 endpoints, a 16k-character prompt; sluice_microbench
// PickerSluiceDecision64x16kHit, pinned) the v3 code took ~4% less time: the cost loop's
// three-operand VEX arithmetic needs fewer register moves, and the block hash's 64-bit multiplies
// and rotates use BMI2. Files that use it are compiled with -ffp-contract=off, so the v3 clone does
// not fuse multiply-adds and both clones compute bit-identical results (fleetsim's output does not
// depend on the machine).
//
// Only with GCC on x86-64 (clang, which the fuzzing build uses, spells the clone list differently);
// SLUICE_NO_CPU_CLONES turns it off. Each call goes through the resolved pointer (an indirect call,
// one per decision or match).
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(SLUICE_NO_CPU_CLONES)
#define SLUICE_CPU_CLONES [[gnu::target_clones("arch=x86-64-v3", "default")]]
#else
#define SLUICE_CPU_CLONES
#endif
