/* A model drafter's draft in one foreign call: decode, pick, decode the pick, ... (relaxtui/engine/native.py).

   Why C: between two decodes of a CPU-run model its weights have streamed through every cache, and each Python step
   that follows pays for the interpreter's code and objects coming back from memory (about 0.15 ms per draft step on
   a 2-core EPYC against 0.01 ms for the bare decode call). llama.cpp drafts in C++ for the same reason
   (common_speculative). This file does only what the Python draft step does, with the same float64 operations in the
   same order, so the tokens, the kept distributions and the raw candidates come out bit for bit the same
   (tests/engine/test_draft_chain.py); whatever it cannot do exactly it leaves to the Python step.

   No llama.cpp header: the caller hands the four functions it uses as pointers, and llama_batch's layout is declared
   here as the llama.h vendored by llama-cpp-python 0.3.36 has it (the binding declares the same fields; chain.py
   compares both with relaxtui_batch_size and runs no chain where they differ). */

#define _POSIX_C_SOURCE 199309L /* clock_gettime */

#include <math.h>
#include <stdint.h>
#include <time.h>

typedef struct {
    int32_t n_tokens;
    int32_t *token;
    float *embd;
    int32_t *pos;
    int32_t *n_seq_id;
    int32_t **seq_id;
    int8_t *logits;
} llama_batch;

typedef int32_t (*decode_fn)(void *ctx, llama_batch batch);
typedef void (*synchronize_fn)(void *ctx);
typedef int32_t *(*candidates_fn)(void *ctx, int32_t i);
typedef float *(*logits_fn)(void *ctx, int32_t i);

enum { CHAIN_DONE = 0, CHAIN_DECODE_FAILED = 1, CHAIN_NUMERICS = 2, CHAIN_NO_ROW = 3 };

/* sizeof(llama_batch) as declared here, for the caller to compare with its binding's before any chain runs. */
int32_t relaxtui_batch_size(void) { return (int32_t) sizeof(llama_batch); }

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double) t.tv_sec + 1e-9 * (double) t.tv_nsec;
}

/* Indices 0..n-1 ordered by key descending, ties in index order (Python's stable sorted(..., reverse=True)). */
static void order_descending(const double *key, int32_t n, int32_t *order) {
    for (int32_t i = 0; i < n; i++) {
        int32_t j = i;
        while (j > 0 && key[order[j - 1]] < key[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
}

/* TopLogits.kept then the inverse-CDF draw (decoding/sampling.py), on a row's n candidates: writes the kept ids in
   ascending order and their probabilities, returns how many were kept; *token gets the pick. 0: the mass is not
   finite and positive (the Python step raises there: the caller hands that row back to it), or the row holds none or
   more than 256 candidates. */
int32_t relaxtui_kept_pick(const int32_t *ids, const float *logits, int32_t n, double temperature, int32_t top_k,
                           double top_p, double uniform, int32_t *kept_ids, double *kept_probs, int32_t *token) {
    int32_t order[256], chosen[256], keep[256];
    double value[256], weight[256];
    int32_t held = n;
    if (n < 1 || n > 256) return 0;
    for (int32_t i = 0; i < n; i++) {
        if (isnan(logits[i])) return 0; /* (Python orders around a NaN its own way: its step decides) */
        chosen[i] = i;
        value[i] = (double) logits[i];
    }
    if (0 < top_k && top_k < held) { /* the top_k largest, the largest first */
        order_descending(value, n, order);
        for (int32_t i = 0; i < top_k; i++) chosen[i] = order[i];
        held = top_k;
    }
    double top = value[chosen[0]];
    for (int32_t i = 1; i < held; i++)
        if (value[chosen[i]] > top) top = value[chosen[i]];
    top = top / temperature;
    double total = 0.0;
    for (int32_t i = 0; i < held; i++) {
        weight[i] = exp(value[chosen[i]] / temperature - top);
        total += weight[i];
    }
    if (!isfinite(total) || !(total > 0.0)) return 0;
    int32_t n_kept = 0;
    double mass = 0.0;
    if (top_p < 1.0) {
        order_descending(weight, held, order);
        for (int32_t r = 0; r < held; r++) {
            keep[n_kept++] = order[r];
            mass += weight[order[r]] / total;
            if (mass >= top_p - 1e-9) break;
        }
    } else {
        for (int32_t i = 0; i < held; i++) keep[n_kept++] = i;
        mass = 1.0;
    }
    for (int32_t i = 1; i < n_kept; i++) { /* ascending ids (unique: a row's candidates are distinct ids) */
        int32_t at = keep[i], j = i;
        while (j > 0 && ids[chosen[keep[j - 1]]] > ids[chosen[at]]) {
            keep[j] = keep[j - 1];
            j--;
        }
        keep[j] = at;
    }
    double running = 0.0, sums[256];
    for (int32_t i = 0; i < n_kept; i++) {
        double prob = weight[keep[i]] / total;
        kept_ids[i] = ids[chosen[keep[i]]];
        kept_probs[i] = mass != 1.0 ? prob / mass : prob;
        running += kept_probs[i];
        sums[i] = running;
    }
    if (!isfinite(running) || !(running > 0.0)) return 0;
    double target = uniform * running;
    int32_t at = n_kept - 1;
    for (int32_t i = 0; i < n_kept; i++) {
        if (sums[i] > target) {
            at = i;
            break;
        }
    }
    *token = kept_ids[at];
    return n_kept;
}

/* What a context's chains share, set once (relaxtui/engine/chain.py's _Call): llama.cpp's context, batch and functions,
   the uniforms in, and the outputs: per step the token, the row's raw candidates (k ids and logits) and the kept
   distribution (sampled; kept_n[step] of them), why it stopped and the time inside llama.cpp. */
typedef struct {
    void *ctx;
    llama_batch *batch;
    decode_fn decode;
    synchronize_fn synchronize;
    candidates_fn candidates_at;
    logits_fn logits_at;
    const double *uniforms;
    int32_t *tokens;
    int32_t *raw_ids;
    float *raw_logits;
    int32_t *kept_n;
    int32_t *kept_ids;
    double *kept_probs;
    int32_t status;
    int32_t decode_status;
    double seconds;
} chain_call;

/* Decode the batch's first n_block tokens (the caller filled them, their last an output row), then draft n_steps
   tokens of sequence 0: each from the last output row's k candidates (llama.cpp's backend sampling), greedy (the
   candidate itself: k = 1) or by relaxtui_kept_pick with uniforms[step]; every pick but the last decoded at the next
   position. Returns the steps drafted; call->status says why it stopped short (a row it hands back to the Python
   step, or llama.cpp's status in decode_status); call->seconds is the time inside llama_decode and
   llama_synchronize. */
int32_t relaxtui_draft_chain(chain_call *call, int32_t n_block, int32_t position, int32_t n_steps, int32_t k,
                             int32_t greedy, double temperature, int32_t top_k, double top_p) {
    void *ctx = call->ctx;
    llama_batch *batch = call->batch;
    int32_t output = n_block - 1;
    batch->n_tokens = n_block;
    call->status = CHAIN_DONE;
    call->seconds = 0.0;
    for (int32_t step = 0; step < n_steps; step++) {
        double started = now();
        int32_t result = call->decode(ctx, *batch);
        if (result == 0) call->synchronize(ctx);
        call->seconds += now() - started;
        if (result != 0) {
            call->decode_status = result;
            call->status = CHAIN_DECODE_FAILED;
            return step;
        }
        const int32_t *ids = call->candidates_at(ctx, output);
        const float *logits = call->logits_at(ctx, output);
        if (ids == 0 || logits == 0) {
            call->status = CHAIN_NO_ROW;
            return step;
        }
        int32_t *row_ids = call->raw_ids + (int64_t) step * k;
        float *row_logits = call->raw_logits + (int64_t) step * k;
        for (int32_t i = 0; i < k; i++) {
            row_ids[i] = ids[i];
            row_logits[i] = logits[i];
        }
        int32_t token;
        if (greedy) {
            if (!isfinite(logits[0])) {
                call->status = CHAIN_NUMERICS;
                return step;
            }
            token = ids[0];
            call->kept_n[step] = 0;
        } else {
            call->kept_n[step] = relaxtui_kept_pick(ids, logits, k, temperature, top_k, top_p, call->uniforms[step],
                                                    call->kept_ids + (int64_t) step * k,
                                                    call->kept_probs + (int64_t) step * k, &token);
            if (call->kept_n[step] == 0) {
                call->status = CHAIN_NUMERICS;
                return step;
            }
        }
        call->tokens[step] = token;
        if (step + 1 < n_steps) { /* the pick is the next decode: one token, its row an output */
            batch->n_tokens = 1;
            batch->token[0] = token;
            batch->pos[0] = position + step;
            batch->logits[0] = 1;
            output = 0;
        }
    }
    return n_steps;
}
