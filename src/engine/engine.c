/* engine.c - the typed queries on an engine (engine.h): what a front-end or
 * the scheduler may learn about an engine's KV memory, answered from its
 * kvmem (kvmem.h) so that nobody outside the engine room touches the pool or
 * the prompt cache. An engine without KV memory (kvmem NULL) can fit any
 * request its context holds and keeps no cache; the model's expert figures
 * come from the model (model.h). Owns kw_engine_* queries. */
#include "kvwise/engine.h"
#include "kvwise/kvmem.h"
#include "kvwise/model.h"
#include <cjson/cJSON.h>

bool kw_engine_could_ever_fit(const kw_engine *e, int32_t n_positions) {
    return !e->kvmem || kw_kvmem_could_ever_fit(e->kvmem, n_positions);
}

int32_t kw_engine_max_positions(const kw_engine *e) {
    return e->kvmem ? kw_kvmem_max_positions(e->kvmem) : e->n_ctx;
}

bool kw_engine_cache_caps(const kw_engine *e, int32_t *max_seqs, uint64_t *max_bytes) {
    *max_seqs = 0;
    *max_bytes = 0;
    if (!e->kvmem) return false;
    kw_kvmem_stats s = kw_kvmem_get_stats(e->kvmem);
    *max_seqs = s.cache.max_seqs;
    *max_bytes = s.cache.max_bytes;
    return true;
}

int32_t kw_engine_set_cache_caps(kw_engine *e, int32_t max_seqs, uint64_t max_bytes) {
    if (!e->kvmem) return -1;
    int32_t before = kw_kvmem_get_stats(e->kvmem).cache.n_seqs;
    kw_kvmem_set_cache_caps(e->kvmem, max_seqs, max_bytes);
    int32_t after = kw_kvmem_get_stats(e->kvmem).cache.n_seqs;
    return before > after ? before - after : 0;
}

bool kw_engine_caching(const kw_engine *e) { return e->kvmem && kw_kvmem_caching(e->kvmem); }

int32_t kw_engine_cached_prefix(const kw_engine *e, const int32_t *prompt, int32_t n) {
    return e->kvmem ? kw_kvmem_cached_prefix(e->kvmem, prompt, n) : 0;
}

/* Mapped vs used vs resident expert bytes of a mixture-of-experts model. */
static void add_experts_json(const kw_model *m, struct cJSON *obj) {
    kw_expert_stats st;
    if (!kw_model_expert_stats(m, &st)) return;
    cJSON *x = cJSON_AddObjectToObject(obj, "experts");
    if (!x) return;
    cJSON_AddNumberToObject(x, "mapped_bytes", (double)st.mapped_bytes);
    cJSON_AddNumberToObject(x, "used_bytes", (double)st.used_bytes);
    if (st.resident_bytes == UINT64_MAX) cJSON_AddNullToObject(x, "resident_bytes");
    else cJSON_AddNumberToObject(x, "resident_bytes", (double)st.resident_bytes);
    cJSON_AddNumberToObject(x, "experts", st.n_experts);
    cJSON_AddNumberToObject(x, "experts_used", st.n_used);
    cJSON_AddBoolToObject(x, "packing", st.packing);
    cJSON_AddNumberToObject(x, "packed_bytes", (double)st.packed_bytes);
    cJSON_AddNumberToObject(x, "experts_packed", st.n_packed);
    cJSON_AddNumberToObject(x, "pack_growth_bytes", (double)st.pack_growth);
    cJSON_AddBoolToObject(x, "mlock", st.locked);
}

void kw_engine_memory_json(const kw_engine *e, struct cJSON *obj) {
    if (e->kvmem) kw_kvmem_add_json(e->kvmem, obj);
    if (e->model) add_experts_json(e->model, obj);
}

int kw_engine_memory_metrics(const kw_engine *e, char **buf, size_t *len) {
    return e->kvmem ? kw_kvmem_metrics(e->kvmem, buf, len) : 0;
}
