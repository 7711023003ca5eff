/* cuda_sample.cu: dev_sample on the GPU, the host half: checks the rows, turns each into
 * a job (its draw, its edits), runs the kernel (cuda_sample_kernel.cu) and samples on the
 * host the rows the kernel does not take. The design: cuda_sample.cuh. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "gpu/cuda/cuda_sample.cuh"

/* An edit before grouping: token and operation. */
typedef struct sample_pending {
    int32_t id;
    sample_edit edit;
} sample_pending;

/* Everything the call sends, built on the host. */
struct sample_plan {
    std::vector<sample_job> jobs;
    std::vector<int32_t> job_rows; /* the caller's row of each job */
    std::vector<sample_group> groups;
    std::vector<sample_edit> edits;
    std::vector<uint32_t> allowed;  /* the masked jobs' grammar bitsets, one after another */
    std::vector<int32_t> host_rows; /* rows sample/sample.c samples on the host */
    std::vector<sample_pending> pending;
    std::vector<int32_t> counts; /* (V) all zero between rows; sized when penalties first need it */
};

static sp_status ids_check(const int32_t *ids, int32_t n, int32_t n_vocab, int32_t row, const char *what) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab)
            return sp_fail(SP_ERR_INVALID_ARG, "sample: row %d: %s[%d] = %d is outside the vocabulary (%d tokens)", row,
                           what, i, ids[i], n_vocab);
    return SP_OK;
}

static sp_status row_check(const dev_sample_row *r, int32_t i, int32_t n_vocab) {
    const sample_params *p = r->params;
    sp_status st;
    if ((st = ids_check(r->prompt, r->n_prompt, n_vocab, i, "prompt")) != SP_OK) return st;
    if ((st = ids_check(r->generated, r->n_generated, n_vocab, i, "generated")) != SP_OK) return st;
    for (int32_t b = 0; b < p->n_logit_bias; b++)
        if ((st = ids_check(&p->logit_bias[b].id, 1, n_vocab, i, "logit_bias")) != SP_OK) return st;
    if (r->top_logprobs > DEV_SAMPLE_MAX_TOP)
        return sp_fail(SP_ERR_INVALID_ARG, "sample: row %d: top_logprobs %d is more than %d", i, r->top_logprobs,
                       DEV_SAMPLE_MAX_TOP);
    if (r->top_logprobs > n_vocab)
        return sp_fail(SP_ERR_INVALID_ARG, "sample: row %d: top_logprobs %d is more than the vocabulary (%d tokens)", i,
                       r->top_logprobs, n_vocab);
    return SP_OK;
}

/* The row's edits, grouped by token in the CPU's order (a stable sort keeps the order in
 * which the mask, sample_apply_penalties' passes and the bias list apply them). */
static void plan_edits(sample_plan *plan, const dev_sample_vocab *vocab, const dev_sample_row *r, sample_job *job) {
    const sample_params *p = r->params;
    std::vector<sample_pending> &pending = plan->pending;
    pending.clear();
    if (r->mask_eog)
        for (int32_t i = 0; i < vocab->n_eog; i++) pending.push_back({vocab->eog_ids[i], {EDIT_SET, -INFINITY}});
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        pending.push_back({p->logit_bias[i].id, {EDIT_ADD, p->logit_bias[i].bias}});
    const bool repetition = p->repetition_penalty != 1.0f;
    const bool presence = p->presence_penalty != 0.0f || p->frequency_penalty != 0.0f;
    if ((repetition || presence) && plan->counts.empty()) plan->counts.assign((size_t)vocab->n_vocab, 0);
    int32_t *counts = plan->counts.data();
    if (repetition) { /* once per distinct token of the prompt and the generated text */
        const int32_t *lists[2] = {r->prompt, r->generated};
        const int32_t lengths[2] = {r->n_prompt, r->n_generated};
        for (int l = 0; l < 2; l++)
            for (int32_t i = 0; i < lengths[l]; i++) {
                const int32_t id = lists[l][i];
                if (counts[id]) continue;
                counts[id] = 1;
                pending.push_back({id, {EDIT_REPEAT, p->repetition_penalty}});
            }
        for (int l = 0; l < 2; l++)
            for (int32_t i = 0; i < lengths[l]; i++) counts[lists[l][i]] = 0;
    }
    if (presence) { /* once per distinct generated token, with its count */
        for (int32_t i = 0; i < r->n_generated; i++) counts[r->generated[i]]++;
        for (int32_t i = 0; i < r->n_generated; i++) {
            const int32_t id = r->generated[i];
            if (!counts[id]) continue;
            pending.push_back({id, {EDIT_SUB, p->frequency_penalty * (float)counts[id]}});
            pending.push_back({id, {EDIT_SUB, p->presence_penalty}});
            counts[id] = 0;
        }
    }
    std::stable_sort(pending.begin(), pending.end(),
                     [](const sample_pending &a, const sample_pending &b) { return a.id < b.id; });
    job->first_group = (int32_t)plan->groups.size();
    for (size_t i = 0; i < pending.size();) {
        sample_group g = {pending[i].id, (int32_t)plan->edits.size(), 0};
        for (; i < pending.size() && pending[i].id == g.id; i++, g.n_edits++) plan->edits.push_back(pending[i].edit);
        plan->groups.push_back(g);
    }
    job->n_groups = (int32_t)plan->groups.size() - job->first_group;
}

/* Jobs for the rows the GPU samples, the draws (u and the generator after them, into
 * results[].rng), and the list of rows left to the host. */
static sp_status plan_build(sample_plan *plan, int32_t n_rows, const dev_sample_vocab *vocab,
                            const dev_sample_row *rows, dev_sample_result *results) {
    const int32_t n_vocab = vocab->n_vocab;
    if (n_vocab <= 0) return sp_fail(SP_ERR_INVALID_ARG, "sample: vocabulary size %d must be positive", n_vocab);
    sp_status st = ids_check(vocab->eog_ids, vocab->n_eog, n_vocab, 0, "eog_ids");
    if (st != SP_OK) return st;
    for (int32_t i = 0; i < n_rows; i++) {
        const dev_sample_row *r = &rows[i];
        const sample_params *p = r->params;
        if ((st = row_check(r, i, n_vocab)) != SP_OK) return st;
        /* sample_token's decisions, in its order: greedy draws nothing */
        const float inv_t = 1.0f / p->temperature;
        const bool greedy = !(p->temperature > 0.0f) || !isfinite(inv_t);
        const bool top_k = p->top_k > 0 && p->top_k < n_vocab;
        if (!greedy && top_k && p->top_k > SORT_MAX) { /* past what the kernel selects */
            plan->host_rows.push_back(i);
            continue;
        }
        sample_job job = {};
        job.row = i;
        job.top_logprobs = r->top_logprobs;
        job.inv_t = inv_t;
        job.top_p = p->top_p;
        job.top_k = top_k ? p->top_k : 0;
        job.min_p_on = p->min_p > 0.0f;
        job.log_min_p = job.min_p_on ? logf(p->min_p) : -INFINITY;
        uint64_t rng = r->rng;
        if (greedy)
            job.mode = MODE_GREEDY;
        else {
            job.u = sample_rng_uniform(&rng); /* sample/sample.c's generator itself */
            job.mode = top_k ? MODE_TOP_K : p->top_p < 1.0f ? MODE_TOP_P : job.min_p_on ? MODE_MIN_P : MODE_ALL;
        }
        results[i].rng = rng;
        job.allowed_at = -1;
        if (r->allowed) { /* the grammar's bitset goes up as it is */
            const size_t words = ((size_t)n_vocab + 31) / 32;
            job.allowed_at = (int64_t)plan->allowed.size();
            plan->allowed.insert(plan->allowed.end(), r->allowed, r->allowed + words);
        }
        plan_edits(plan, vocab, r, &job);
        plan->jobs.push_back(job);
        plan->job_rows.push_back(i);
    }
    return SP_OK;
}

/* A row sampled by sample/sample.c as the CPU backend's host_sample.c does it; raw (V)
 * is the row as the step left it. */
static sp_status sample_on_host(float *raw, int32_t n_vocab, const dev_sample_vocab *vocab, const dev_sample_row *r,
                                dev_sample_result *res) {
    std::vector<float> logits(raw, raw + n_vocab);
    sample_state s;
    sp_status st = sample_state_init(&s, n_vocab, r->rng);
    if (st != SP_OK) return st;
    double lse = 0.0;
    if (r->top_logprobs >= 0) {
        lse = sample_logsumexp(raw, n_vocab);
        if (r->top_logprobs > 0) sample_top_logprobs(raw, n_vocab, lse, r->top_logprobs, res->top);
    }
    if (r->mask_eog)
        for (int32_t i = 0; i < vocab->n_eog; i++) logits[(size_t)vocab->eog_ids[i]] = -INFINITY;
    if (r->allowed) sample_apply_allowed(r->allowed, n_vocab, logits.data());
    sample_apply_penalties(r->params, &s, r->prompt, r->n_prompt, r->generated, r->n_generated, logits.data());
    res->token = sample_token(r->params, &s, logits.data());
    res->rng = s.rng;
    res->logprob = r->top_logprobs >= 0 ? (float)((double)raw[res->token] - lse) : 0.0f;
    sample_state_free(&s);
    return SP_OK;
}

static size_t align16(size_t n) {
    return (n + 15) & ~(size_t)15;
}

/* Copies n bytes of a vector's data to dst (nothing for an empty vector). */
template <typename T> static void blob_put(unsigned char *dst, const std::vector<T> &v) {
    if (!v.empty()) memcpy(dst, v.data(), sizeof(T) * v.size());
}

/* Runs the plan's jobs: one allocation, one upload, the kernel, one download. */
static sp_status jobs_run(cuda_backend *cb, const sample_plan &plan, float *logits, int32_t n_vocab,
                          std::vector<sample_out> &outs) {
    const size_t n_jobs = plan.jobs.size(), n_groups = plan.groups.size();
    const size_t groups_at = align16(sizeof(sample_job) * n_jobs);
    const size_t edits_at = align16(groups_at + sizeof(sample_group) * n_groups);
    const size_t allowed_at = align16(edits_at + sizeof(sample_edit) * plan.edits.size());
    const size_t upload = allowed_at + sizeof(uint32_t) * plan.allowed.size();
    const size_t raw_at = align16(upload);
    const size_t outs_at = align16(raw_at + sizeof(float) * n_groups);
    const size_t bytes = outs_at + sizeof(sample_out) * n_jobs;

    std::vector<unsigned char> blob(upload);
    blob_put(blob.data(), plan.jobs);
    blob_put(blob.data() + groups_at, plan.groups);
    blob_put(blob.data() + edits_at, plan.edits);
    blob_put(blob.data() + allowed_at, plan.allowed);

    unsigned char *d = NULL;
    cudaError_t err = cudaMallocAsync((void **)&d, bytes, cb->stream);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* not a fault: the caller decides */
        return sp_fail(SP_ERR_NOMEM, "cuda: cannot allocate %zu bytes for sampling %zu rows", bytes, n_jobs);
    }
    if (!cuda__ok(cb, err, "cudaMallocAsync(sample)")) return cuda__fault_status(cb);
    outs.resize(n_jobs);
    bool ok = cuda__ok(cb, cudaMemcpyAsync(d, blob.data(), upload, cudaMemcpyHostToDevice, cb->stream),
                       "cudaMemcpyAsync(sample jobs)");
    if (ok)
        ok = cuda__sample_launch(cb, (uint32_t)n_jobs, (sample_out *)(d + outs_at), (float *)(d + raw_at), logits,
                                 (const sample_job *)d, (const sample_group *)(d + groups_at),
                                 (const sample_edit *)(d + edits_at), (const uint32_t *)(d + allowed_at), n_vocab);
    if (ok)
        ok = cuda__ok(
            cb,
            cudaMemcpyAsync(outs.data(), d + outs_at, sizeof(sample_out) * n_jobs, cudaMemcpyDeviceToHost, cb->stream),
            "cudaMemcpyAsync(sample results)");
    ok = cuda__ok(cb, cudaFreeAsync(d, cb->stream), "cudaFreeAsync(sample)") && ok;
    ok = ok && cuda__ok(cb, cudaStreamSynchronize(cb->stream), "cudaStreamSynchronize(sample)");
    return ok ? SP_OK : cuda__fault_status(cb);
}

sp_status cuda__sample(dev_backend *dev, float *logits, int32_t n_rows, const dev_sample_vocab *vocab,
                       const dev_sample_row *rows, dev_sample_result *results) {
    cuda_backend *cb = (cuda_backend *)dev;
    if (cb->faulted) return cuda__fault_status(cb);
    if (n_rows <= 0) return SP_OK;
    const int32_t n_vocab = vocab->n_vocab;
    sample_plan plan;
    sp_status st = plan_build(&plan, n_rows, vocab, rows, results);
    if (st != SP_OK) return st;

    /* rows left to the host: their raw logits, before anything edits them (the kernel
     * leaves them alone; the copy into pageable memory is complete when it returns) */
    std::vector<float> host_logits(plan.host_rows.size() * (size_t)n_vocab);
    for (size_t h = 0; h < plan.host_rows.size(); h++)
        if (!cuda__ok(cb,
                      cudaMemcpyAsync(host_logits.data() + h * (size_t)n_vocab,
                                      logits + (size_t)plan.host_rows[h] * (size_t)n_vocab,
                                      sizeof(float) * (size_t)n_vocab, cudaMemcpyDeviceToHost, cb->stream),
                      "cudaMemcpyAsync(sample row)"))
            return cuda__fault_status(cb);

    if (!plan.jobs.empty()) {
        std::vector<sample_out> outs;
        if ((st = jobs_run(cb, plan, logits, n_vocab, outs)) != SP_OK) return st;
        for (size_t j = 0; j < outs.size(); j++) {
            const int32_t i = plan.job_rows[j];
            dev_sample_result *res = &results[i];
            res->token = outs[j].token;
            res->logprob = outs[j].logprob;
            for (int k = 0; k < rows[i].top_logprobs; k++) res->top[k] = outs[j].top[k];
        }
    }
    for (size_t h = 0; h < plan.host_rows.size(); h++) {
        const int32_t i = plan.host_rows[h];
        st = sample_on_host(host_logits.data() + h * (size_t)n_vocab, n_vocab, vocab, &rows[i], &results[i]);
        if (st != SP_OK) return st;
    }
    return SP_OK;
}
