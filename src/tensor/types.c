/* types.c - the GGUF/ggml element-type table and scalar half-precision
 * conversions.
 *
 * Owns kw_type_traits for every type id a GGUF file may carry (block size
 * and bytes per block are ggml's, including types kvwise cannot compute
 * with, so a file's tensor sizes can be validated), type names, row sizes,
 * and the F16/BF16 <-> F32 conversions (round to nearest even). */
#include "kvwise/tensor.h"
#include <string.h>
#include <strings.h>

/* Ids 4, 5 (old Q4_2/Q4_3) and 31-33, 36-38 (removed repacked formats) are
 * not valid in GGUF files; their entries stay zero (name NULL). */
static const kw_type_traits g_traits[KW_TYPE_COUNT] = {
    [0] = {"f32", 1, 4, true},
    [1] = {"f16", 1, 2, true},
    [2] = {"q4_0", 32, 18, true},
    [3] = {"q4_1", 32, 20, true},
    [6] = {"q5_0", 32, 22, true},
    [7] = {"q5_1", 32, 24, true},
    [8] = {"q8_0", 32, 34, true},
    [9] = {"q8_1", 32, 36, false},
    [10] = {"q2_k", 256, 84, false},
    [11] = {"q3_k", 256, 110, false},
    [12] = {"q4_k", 256, 144, true},
    [13] = {"q5_k", 256, 176, true},
    [14] = {"q6_k", 256, 210, true},
    [15] = {"q8_k", 256, 292, false},
    [16] = {"iq2_xxs", 256, 66, false},
    [17] = {"iq2_xs", 256, 74, false},
    [18] = {"iq3_xxs", 256, 98, false},
    [19] = {"iq1_s", 256, 50, false},
    [20] = {"iq4_nl", 32, 18, false},
    [21] = {"iq3_s", 256, 110, false},
    [22] = {"iq2_s", 256, 82, false},
    [23] = {"iq4_xs", 256, 136, false},
    [24] = {"i8", 1, 1, false},
    [25] = {"i16", 1, 2, false},
    [26] = {"i32", 1, 4, false},
    [27] = {"i64", 1, 8, false},
    [28] = {"f64", 1, 8, false},
    [29] = {"iq1_m", 256, 56, false},
    [30] = {"bf16", 1, 2, true},
    [34] = {"tq1_0", 256, 54, false},
    [35] = {"tq2_0", 256, 66, false},
};

const kw_type_traits *kw_type_traits_get(uint32_t type) {
    if (type >= KW_TYPE_COUNT || g_traits[type].name == NULL) return NULL;
    return &g_traits[type];
}

const char *kw_type_name(uint32_t type) {
    const kw_type_traits *t = kw_type_traits_get(type);
    return t ? t->name : "?";
}

int kw_type_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < KW_TYPE_COUNT; i++)
        if (g_traits[i].name && strcasecmp(g_traits[i].name, name) == 0) return i;
    return -1;
}

size_t kw_row_bytes(uint32_t type, int64_t n) {
    const kw_type_traits *t = kw_type_traits_get(type);
    if (!t || n < 0 || n % t->block_size != 0) return 0;
    return (size_t)(n / t->block_size) * (size_t)t->type_size;
}

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float kw_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0) {
        float v = (float)mant * 5.9604644775390625e-8f;   /* mant * 2^-24, exact */
        return bits_f32(sign | f32_bits(v));
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

uint16_t kw_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint32_t sign = (u >> 16) & 0x8000;
    u &= 0x7fffffffu;
    if (u >= 0x47800000u)                      /* >= 65536, inf or nan */
        return (uint16_t)(sign | (u > 0x7f800000u ? 0x7e00 : 0x7c00));
    if (u < 0x38800000u) {                     /* result is subnormal or zero */
        /* Adding 0.5 (2^-1) aligns the value so that the FPU's own
         * round-to-nearest-even leaves the half mantissa in the low bits. */
        float v = bits_f32(u) + 0.5f;
        return (uint16_t)(sign | (f32_bits(v) - 0x3f000000u));
    }
    uint32_t odd = (u >> 13) & 1;
    u += 0xc8000fffu + odd;                    /* rebias exponent (-112 << 23) and round */
    return (uint16_t)(sign | (u >> 13));
}

float kw_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t kw_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);   /* quiet nan */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}
