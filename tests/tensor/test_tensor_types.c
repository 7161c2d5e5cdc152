/* test_tensor_types.c - the type table, names, row sizes and the F16/BF16
 * conversions (exhaustive where the domain is small). */
#include "testutil.h"
#include <string.h>
#include "kvwise/tensor.h"

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void test_traits(void) {
    /* ggml's (block size, bytes) for every GGUF type id. */
    static const struct { uint32_t id; int bs, ts; bool sup; const char *name; } want[] = {
        {0, 1, 4, true, "f32"}, {1, 1, 2, true, "f16"}, {2, 32, 18, true, "q4_0"}, {3, 32, 20, true, "q4_1"},
        {6, 32, 22, true, "q5_0"}, {7, 32, 24, true, "q5_1"}, {8, 32, 34, true, "q8_0"}, {9, 32, 36, false, "q8_1"},
        {10, 256, 84, false, "q2_k"}, {11, 256, 110, false, "q3_k"}, {12, 256, 144, true, "q4_k"},
        {13, 256, 176, true, "q5_k"}, {14, 256, 210, true, "q6_k"}, {15, 256, 292, false, "q8_k"},
        {16, 256, 66, false, "iq2_xxs"}, {17, 256, 74, false, "iq2_xs"}, {18, 256, 98, false, "iq3_xxs"},
        {19, 256, 50, false, "iq1_s"}, {20, 32, 18, false, "iq4_nl"}, {21, 256, 110, false, "iq3_s"},
        {22, 256, 82, false, "iq2_s"}, {23, 256, 136, false, "iq4_xs"}, {24, 1, 1, false, "i8"},
        {28, 1, 8, false, "f64"}, {29, 256, 56, false, "iq1_m"}, {30, 1, 2, true, "bf16"},
        {34, 256, 54, false, "tq1_0"}, {35, 256, 66, false, "tq2_0"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const kw_type_traits *t = kw_type_traits_get(want[i].id);
        KW_CHECK_MSG(t != NULL, "type %u", want[i].id);
        if (!t) continue;
        KW_CHECK_EQ_INT(t->block_size, want[i].bs);
        KW_CHECK_EQ_INT(t->type_size, want[i].ts);
        KW_CHECK_EQ_INT(t->supported, want[i].sup);
        KW_CHECK(strcmp(t->name, want[i].name) == 0);
        KW_CHECK_EQ_INT(kw_type_from_name(want[i].name), want[i].id);
    }
    KW_CHECK(kw_type_traits_get(4) == NULL);     /* removed Q4_2 */
    KW_CHECK(kw_type_traits_get(31) == NULL);    /* removed Q4_0_4_4 */
    KW_CHECK(kw_type_traits_get(39) == NULL);
    KW_CHECK(kw_type_traits_get(1000000) == NULL);
    KW_CHECK(strcmp(kw_type_name(999), "?") == 0);
    KW_CHECK_EQ_INT(kw_type_from_name("Q4_K"), KW_TYPE_Q4_K);
    KW_CHECK_EQ_INT(kw_type_from_name("nope"), -1);
    KW_CHECK_EQ_INT(kw_type_from_name(NULL), -1);
    KW_CHECK_EQ_INT(kw_row_bytes(KW_TYPE_Q4_0, 2048), 64 * 18);
    KW_CHECK_EQ_INT(kw_row_bytes(KW_TYPE_Q6_K, 4096), 16 * 210);
    KW_CHECK_EQ_INT(kw_row_bytes(KW_TYPE_Q4_K, 100), 0);
    KW_CHECK_EQ_INT(kw_row_bytes(KW_TYPE_F16, 7), 14);
    KW_CHECK_EQ_INT(kw_row_bytes(4, 32), 0);
}

static void test_f16(void) {
    /* Every non-NaN half survives half -> float -> half. */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        bool nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
        if (nan) { KW_CHECK_MSG(kw_f16_to_f32((uint16_t)h) != kw_f16_to_f32((uint16_t)h), "nan %x", h); continue; }
        if (kw_f32_to_f16(kw_f16_to_f32((uint16_t)h)) != h) bad++;
    }
    KW_CHECK_EQ_INT(bad, 0);
    KW_CHECK(kw_f16_to_f32(0x3c00) == 1.0f);
    KW_CHECK(kw_f16_to_f32(0xc000) == -2.0f);
    KW_CHECK(kw_f16_to_f32(0x0001) == 5.9604644775390625e-8f);   /* smallest subnormal 2^-24 */
    KW_CHECK(kw_f16_to_f32(0x7bff) == 65504.0f);
    KW_CHECK_EQ_INT(kw_f32_to_f16(65519.0f), 0x7bff);            /* below the halfway point */
    KW_CHECK_EQ_INT(kw_f32_to_f16(65520.0f), 0x7c00);            /* halfway rounds to even = inf */
    KW_CHECK_EQ_INT(kw_f32_to_f16(1e10f), 0x7c00);
    KW_CHECK_EQ_INT(kw_f32_to_f16(-1e10f), 0xfc00);
    /* 1 + 2^-11 is halfway between 1 and 1+2^-10: ties to even (1). */
    KW_CHECK_EQ_INT(kw_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    KW_CHECK_EQ_INT(kw_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
    KW_CHECK_EQ_INT(kw_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);  /* tie, odd below -> up */
    KW_CHECK_EQ_INT(kw_f32_to_f16(0x1p-25f), 0x0000);            /* tie at half the smallest subnormal -> 0 */
    KW_CHECK_EQ_INT(kw_f32_to_f16(0x1.8p-24f), 0x0002);          /* 1.5 units -> 2 (even) */
    KW_CHECK_EQ_INT(kw_f32_to_f16(-0.0f), 0x8000);
    KW_CHECK_EQ_INT(kw_f32_to_f16(bitsf(0x7fc00000)) & 0x7e00, 0x7e00);
    /* Rounding agrees with the nearest representable half on a sweep of floats. */
    int wrong = 0;
    for (uint32_t u = 0x33000001u; u < 0x477fe000u; u += 4099) {
        float f = bitsf(u);
        uint16_t h = kw_f32_to_f16(f);
        float lo = kw_f16_to_f32(h), hi = kw_f16_to_f32((uint16_t)(h + 1)), lo2 = kw_f16_to_f32((uint16_t)(h - 1));
        if (fabsf(lo - f) > fabsf(hi - f) || fabsf(lo - f) > fabsf(lo2 - f)) wrong++;
    }
    KW_CHECK_EQ_INT(wrong, 0);
}

static void test_bf16(void) {
    KW_CHECK_EQ_INT(kw_f32_to_bf16(1.0f), 0x3f80);
    KW_CHECK(kw_bf16_to_f32(0x3f80) == 1.0f);
    KW_CHECK_EQ_INT(kw_f32_to_bf16(bitsf(0x3f808000)), 0x3f80);   /* tie -> even */
    KW_CHECK_EQ_INT(kw_f32_to_bf16(bitsf(0x3f818000)), 0x3f82);   /* tie, odd -> up */
    KW_CHECK_EQ_INT(kw_f32_to_bf16(bitsf(0x3f808001)), 0x3f81);
    KW_CHECK_EQ_INT(kw_f32_to_bf16(bitsf(0x7f800001)) & 0x7fc0, 0x7fc0);  /* nan stays (quiet) nan */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f)) continue;
        if (kw_f32_to_bf16(kw_bf16_to_f32((uint16_t)h)) != h) bad++;
    }
    KW_CHECK_EQ_INT(bad, 0);
    (void)fbits;
}

int main(void) {
    test_traits();
    test_f16();
    test_bf16();
    return kw_test_finish();
}
