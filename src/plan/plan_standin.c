/* plan_standin.c - TEMPORARY: the forward-pass workspace (model.h,
 * kw_ctx_workspace_bytes) until the model module lands on main; then this
 * file goes and plan_internal.h maps the name to the real function. */
#include "plan_internal.h"
#include "kvwise/tensor.h"

size_t plan_ctx_workspace_bytes(const kw_hparams *hp, int32_t T, int32_t C, int n_threads) {
    size_t t = (size_t)T, f = 4, E = (size_t)hp->n_embd;
    size_t hk = (size_t)hp->head_dim_k, hv = (size_t)hp->head_dim_v;
    size_t work = t * f * (3 * E + (size_t)hp->n_head * (hk + hv) + (size_t)hp->n_head_kv * (hk + hv) +
                           2 * (size_t)hp->n_ff + (size_t)hp->rope_dim + 1);
    size_t big = (size_t)hp->n_ff > E ? (size_t)hp->n_ff : E;
    size_t mm = t * big * 2 + (size_t)hp->n_vocab * f;
    size_t att = (size_t)(n_threads > 0 ? n_threads : 1) * ((size_t)C + hk + 2 * hv) * f;
    return work + mm + att;
}
