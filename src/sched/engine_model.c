/* engine_model.c - the real-model engine behind the scheduler: kw_model,
 * its kw_ctx workspace, the paged KV pool and one block table per slot.
 * (Placeholder until the forward pass lands on main.) */
#include "kvwise/sched.h"

kw_engine *kw_engine_model_create(const kw_engine_model_opts *o, kw_err *err) {
    kw_err_set(err, "model '%s': the forward pass is not available in this build yet (use --stub-engine for tests)",
               o->model_path ? o->model_path : "");
    return NULL;
}
