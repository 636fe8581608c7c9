/* model.h: the Transformer of Vaswani et al. (2017): parameters, forward, backward, and
 * incremental decoding, written once against the backend table (backend.h).
 *
 * Architecture (section 3 of the paper; the choices it leaves open are marked *, and listed
 * in tfm-config(5), DECISIONS THE PAPER LEAVES OPEN):
 *  - Encoder and decoder stacks of cfg->layers layers.  Encoder layer: self-attention,
 *    FFN.  Decoder layer: causal self-attention, encoder-decoder attention over the
 *    encoder stack's output, FFN.  FFN(x) = max(0, x W1 + b1) W2 + b2.
 *  - Around every sub-layer: post-norm (paper) x = LN(x + Drop(Sub(x))), no final LN*;
 *    or pre-norm x = x + Drop(Sub(LN(x))), with a final LN at the end of each stack*.
 *  - Inputs: x = Drop(sqrt(d_model) * E[id] + P[pos]), positions 0, 1, ...; P is the paper's
 *    interleaved sinusoid P(pos,2i) = sin(pos/10000^(2i/d)), P(pos,2i+1) = cos(...), or a
 *    learned table (cfg->pos).  The decoder input is bos followed by tgt[0..T-2] (shifted
 *    right); the labels are tgt.
 *  - Attention: h heads, d_k = d_v = d_model/h, scores scaled by 1/sqrt(d_k); keys beyond a
 *    source sentence's length are masked (padding mask*), and the decoder's self-attention
 *    is causal.  Padding (id 0) must come after a sentence's last token; a sentence's
 *    length is its number of tokens before the padding.
 *  - Biases*: every linear layer has one (Q, K, V, output projections, FFN) except the
 *    pre-softmax projection.  Q, K, V of self-attention are one (D,3D) matrix, columns
 *    [Q | K | V]; encoder-decoder attention has wq (D,D) and wkv (D,2D) [K | V].
 *  - Weights are stored (in, out): y = x W + b.  Embeddings and the output matrix are
 *    (V, D); logits = y E^T.  tie=1: one matrix "emb" for source, target and output;
 *    tie=0: "src_emb", "tgt_emb", "out".
 *  - Dropout*: cfg->dropout on every sub-layer output and on both embedding sums;
 *    cfg->attn_dropout on the attention weights; cfg->relu_dropout on the ReLU output.
 *  - Label smoothing*: q = (1 - eps) onehot(y) + eps/V over all V classes; padding labels
 *    carry no loss.
 *  - Initialization*: weight matrices Xavier-uniform, U(-a, a), a = sqrt(6/(in+out)), with
 *    Q, K, V (and K, V) each counted as its own (D,D) matrix; embeddings, the untied output
 *    matrix and learned positions N(0, d_model^-0.5); biases 0; LN gain 1, bias 0.
 *    Random numbers from splitmix64 keyed by (seed, tensor, element): the same seed gives
 *    the same model on every machine.
 *  - LN eps: cfg->ln_eps (default 1e-5)*.
 *
 * Memory: one parameter arena (parameters, gradients, Adam m, Adam v: four equal blocks,
 * each tensor at the same offset in each) and one activation arena sized from the token
 * budget, both allocated by tfm_model_create; nothing is allocated in a step.
 * Precision (tfm-config(5), precision) is the backend's: the model sets it from the
 * config when it is created (tfm_backend_set_precision), sizes its activations with the
 * backend's act_size, reads the weights through tfm_param.w, and keeps everything it owns
 * in fp32 otherwise (master weights, gradients, Adam moments, statistics).
 * Gradients are of the SUM of the per-token losses over the batch (not the mean), and
 * accumulate over calls until tfm_model_zero_grad: the optimizer divides by the number of
 * target tokens of the whole update (all batches and ranks), so accumulation and ranks add.
 *
 * Not here: the optimizer and schedule (optim.h), checkpoints (checkpoint.h), the search
 * (beam.h), the training loop (train.c).
 */
#ifndef TFM_MODEL_H
#define TFM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "config.h"
#include "error.h"

#define TFM_PAD 0
#define TFM_UNK 1
#define TFM_BOS 2
#define TFM_EOS 3

struct tfm_model;

/* One parameter tensor.  data/grad/m/v are device pointers into the arena. */
/* How a parameter starts (tfm-config(5), "Initialization"). */
enum tfm_init {
    TFM_INIT_ZERO,          /* biases, layer-norm shifts */
    TFM_INIT_ONE,           /* layer-norm gains */
    TFM_INIT_NORMAL,        /* embeddings and learned positions: N(0, 1/d_model) */
    TFM_INIT_XAVIER,        /* matrices: Xavier-uniform over (rows, cols / parts) */
};

struct tfm_param {
    char name[64];          /* "enc.0.self.wqkv"; records are "param." + name */
    int rank;               /* 1 or 2 */
    int64_t dims[2];
    int64_t count;
    enum tfm_init init;
    int parts;              /* XAVIER: side-by-side matrices (wqkv 3, wkv 2, others 1) */
    size_t offset;          /* in floats, the same in every block of the arena */
    float *data, *grad, *m, *v;
    /* The weights the ops read: data itself at fp32; at bf16 the compute copy, made from
     * data by tfm_model_sync_weights (backend.h, weights_copy). */
    float *w;
};

/* Bytes that tfm_model_create allocates for cfg with a batch budget of max_tokens padded
 * tokens per side (source B*S and target B*T each <= max_tokens): the parameter arena
 * plus the activation arena (fp32 words), and with precision bf16 the compute copy of the
 * weights (counted in fp32 words: an upper bound on any device).  A pure function of its
 * arguments; 0 if cfg is invalid. */
size_t tfm_model_memory(const struct tfm_config *cfg, int64_t max_tokens);
/* Bytes of the parameter arena alone (params, grads, Adam m and v). */
size_t tfm_model_param_memory(const struct tfm_config *cfg);
/* Bytes of the activation arena alone (fp32 words): the part of tfm_model_memory that
 * grows with max_tokens; the rest is the model's whatever the budget.  0 if cfg is
 * invalid. */
size_t tfm_model_activation_memory(const struct tfm_config *cfg, int64_t max_tokens);

/* Build a model of cfg (cfg->vocab > 0) on be, for batches of up to max_tokens padded
 * tokens per side (0: cfg->tokens), and initialize its parameters from cfg->seed.
 * Gradients and Adam moments start at zero.  The model keeps a copy of cfg and uses be
 * until freed.  NULL with err. */
struct tfm_model *tfm_model_create(const struct tfm_config *cfg, struct tfm_backend *be,
                                   int64_t max_tokens, struct tfm_error *err);
/* The same for inference (evaluation, log-probabilities, decoding): the parameters alone,
 * zero until set (tfm_model_set / tfm_model_upload of TFM_PARAMS); no gradients or Adam
 * moments (their blocks are NULL), and tfm_model_train_batch refuses it. */
struct tfm_model *tfm_model_create_inference(const struct tfm_config *cfg,
                                             struct tfm_backend *be, int64_t max_tokens,
                                             struct tfm_error *err);
void tfm_model_free(struct tfm_model *m);
const struct tfm_config *tfm_model_config(const struct tfm_model *m);
struct tfm_backend *tfm_model_backend(const struct tfm_model *m);

/* The paper's position encoding: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
 * PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)), dims interleaved (computed in double). */
double tfm_model_sinusoid(int pos, int dim, int d_model);

/* ---- parameters ------------------------------------------------------------------- */

int tfm_model_nparams(const struct tfm_model *m);                 /* tensors */
const struct tfm_param *tfm_model_param(const struct tfm_model *m, int i);
const struct tfm_param *tfm_model_find(const struct tfm_model *m, const char *name);
int64_t tfm_model_count(const struct tfm_model *m);               /* floats per block */
/* The parameter tensors a model of cfg has (names, ranks, dims, counts and offsets as
 * tfm_model_create lays them out; no memory: data, grad, m, v are NULL), without building
 * one: *params (malloc'd, free with free) and *n.  -1 with err when cfg is invalid. */
int tfm_model_layout(const struct tfm_config *cfg, struct tfm_param **params, int *n,
                     struct tfm_error *err);

enum tfm_block { TFM_PARAMS = 0, TFM_GRADS = 1, TFM_ADAM_M = 2, TFM_ADAM_V = 3 };
/* The device pointer to a whole block (tfm_model_count floats, tensors at their offsets);
 * NULL for all but TFM_PARAMS on an inference model. */
float *tfm_model_block(const struct tfm_model *m, enum tfm_block b);
/* Copy a whole block to host / from host (tfm_model_count floats). */
void tfm_model_download(const struct tfm_model *m, enum tfm_block b, float *host);
void tfm_model_upload(struct tfm_model *m, enum tfm_block b, const float *host);
/* Set one tensor of a block from host data; -1 with err when the name is unknown or the
 * count differs from the tensor's. */
int tfm_model_set(struct tfm_model *m, enum tfm_block b, const char *name, const float *host,
                  int64_t count, struct tfm_error *err);
/* Point parameter `name` of an inference model at data (count floats) instead of copying
 * it there: the model reads the weights where their owner keeps them (a checkpoint's
 * memory map: tfm_checkpoint_share_model), which must hold them unchanged until the model
 * is freed or the parameter set again.  Only where the ops read fp32 parameters in host
 * memory: an inference model on a backend with host_memory, without a compute copy
 * (fp32), data 64-byte aligned; otherwise it copies, as tfm_model_set.  1 when shared, 0
 * when copied, -1 with err (tfm_model_set's).  tfm_model_set and tfm_model_upload of
 * TFM_PARAMS copy into the model's own memory again; tfm_model_download reads a shared
 * parameter where it is; tfm_model_block(TFM_PARAMS) holds the others only. */
int tfm_model_share(struct tfm_model *m, const char *name, const float *data, int64_t count,
                    struct tfm_error *err);
/* The parameters tfm_model_share left shared. */
int tfm_model_shared(const struct tfm_model *m);
/* Zero the gradients and the losses summed in the step's statistics. */
void tfm_model_zero_grad(struct tfm_model *m);
/* The statistics of the optimizer step under way (backend.h, struct tfm_step_stats), in
 * device memory: every training batch adds its loss and nll to them; tfm_optim_step
 * writes the gradient norm and clipping there, reads them, and zeroes them. */
struct tfm_step_stats *tfm_model_step_stats(struct tfm_model *m);
/* Make the compute copy of the weights (tfm_param.w) from the fp32 master weights again,
 * once per change of them: the optimizer calls it after each update; creation,
 * tfm_model_upload and tfm_model_set of TFM_PARAMS call it themselves.  Nothing to do at
 * fp32 (the ops read the master weights). */
void tfm_model_sync_weights(struct tfm_model *m);

/* ---- training and evaluation ------------------------------------------------------------ */

/* The sums over one batch's non-padding target tokens. */
struct tfm_loss {
    double loss;            /* label-smoothed cross-entropy, summed over tokens (nats) */
    double nll;             /* -log P(label), summed (perplexity = exp(nll / tokens)) */
    int64_t tokens;         /* target tokens (labels != pad) */
    int64_t src_tokens;     /* source tokens (ids != pad) */
};

/* A batch of B sentence pairs: src (B,S), tgt (B,T) host int32, padded with 0 after
 * each sentence; every id in [0, vocab).  Forward and backward: adds the gradient of the
 * summed loss to the gradients and its loss and nll to the step's statistics
 * (tfm_model_step_stats), fills out (reading the loss from the device).  rng_step keys
 * the dropout masks (with cfg->seed): give each forward pass of a run its own value (e.g.
 * the micro-batch counter across ranks), the same value to reproduce it.  Fails (nothing computed) when
 * the batch exceeds the arena ("batch of B x S ... exceeds the token budget M") or
 * S, T > max_len, or ids are out of range. */
int tfm_model_train_batch(struct tfm_model *m, int B, int S, int T, const int32_t *src,
                          const int32_t *tgt, uint64_t rng_step, struct tfm_loss *out,
                          struct tfm_error *err);
/* The same without reading the device: out gets the token counts (known on the host) and
 * loss = nll = 0; the loss and nll wait in the step's statistics, which tfm_optim_step
 * reads (the trainer's way: one read an update, however many batches it has). */
int tfm_model_train_batch_dev(struct tfm_model *m, int B, int S, int T, const int32_t *src,
                              const int32_t *tgt, uint64_t rng_step, struct tfm_loss *out,
                              struct tfm_error *err);
/* Forward only, no dropout, no gradients (validation). */
int tfm_model_eval_batch(struct tfm_model *m, int B, int S, int T, const int32_t *src,
                         const int32_t *tgt, struct tfm_loss *out, struct tfm_error *err);
/* Forward only, no dropout: log-probabilities (B*T, vocab) host, row b*T+t = log P(next
 * token | src_b, bos tgt_b[0..t-1]) (teacher forcing; rows past a sentence's end are
 * computed like the others).  For tests and rescoring. */
int tfm_model_logprobs(struct tfm_model *m, int B, int S, int T, const int32_t *src,
                       const int32_t *tgt, float *logp, struct tfm_error *err);

/* The attention weights of one sentence pair under teacher forcing, as in
 * tfm_model_logprobs with B = 1 (no dropout): src (S) and tgt (T) host ids without
 * padding; the decoder's inputs are bos tgt[0..T-2], so row t is the query that predicts
 * tgt[t].  Host outputs, row-major, every row a distribution over its keys:
 *   cross    (N,H,T,S)  encoder-decoder attention of decoder layer l, head h
 *   enc_self (N,H,S,S)  encoder self-attention, or NULL
 *   dec_self (N,H,T,T)  decoder self-attention (0 above the diagonal), or NULL
 * P = softmax(q.k / sqrt(d_k)) is computed on the host, in double, from the queries and
 * keys of the forward pass: for inspection, not for training.  0, or -1 with err. */
int tfm_model_attention(struct tfm_model *m, int S, int T, const int32_t *src,
                        const int32_t *tgt, float *cross, float *enc_self, float *dec_self,
                        struct tfm_error *err);

/* ---- incremental decoding --------------------------------------------------------------- */

/* Decoding state: the encoded sources of one call and the decoder's cached self-attention
 * keys and values for up to max_rows live hypotheses ("rows").  Encoder-decoder keys and
 * values are computed once per sentence and shared by the rows of that sentence.  Its
 * memory is allocated once by tfm_decoder_create. */
struct tfm_decoder;

/* For up to max_sent sentences of up to max_src tokens, max_rows rows and max_steps
 * decoder steps (positions; <= cfg->max_len). */
struct tfm_decoder *tfm_decoder_create(struct tfm_model *m, int max_sent, int max_src,
                                       int max_rows, int max_steps, struct tfm_error *err);
void tfm_decoder_free(struct tfm_decoder *d);
/* Make d ready for calls of other sizes, as if created again, keeping its memory when the
 * new sizes fit in it (decoding batch after batch allocates once).  Forgets every row and
 * the encoded sources.  0, or -1 with err (d is then unusable until a reshape succeeds). */
int tfm_decoder_reshape(struct tfm_decoder *d, int max_sent, int max_src, int max_rows,
                        int max_steps, struct tfm_error *err);
/* Encode B sources (B,S) host, padded with 0; forget every row.  The next step starts
 * at position 0.  The encoder runs in groups of sentences that fit the model's token
 * budget (tfm_model_create's max_tokens >= max_src is enough). */
int tfm_decoder_encode(struct tfm_decoder *d, int B, int S, const int32_t *src,
                       struct tfm_error *err);
/* One decoder step for nrows rows: row r's prefix grows by last_tok[r] (bos at the first
 * step) and logp (nrows, vocab) host gets log P(next token | source row_src[r], prefix).
 * The first step after encode creates the rows; later steps must give the current number
 * of rows (after tfm_decoder_select).  row_src[r] (0..B-1) picks the encoded source row r
 * attends to. */
int tfm_decoder_step(struct tfm_decoder *d, int nrows, const int32_t *last_tok,
                     const int32_t *row_src, float *logp, struct tfm_error *err);
/* The same step, giving what a search needs instead of every log-probability: each row's
 * k best tokens (ids in ban[0..nban) skipped) into top_lp, top_tok (nrows, k) host, and
 * the log-probability of token `also` into also_lp (nrows) host; see tfm_step_model's
 * step_top (beam.h).  The values are the bits tfm_decoder_step would give. */
int tfm_decoder_step_top(struct tfm_decoder *d, int nrows, const int32_t *last_tok,
                         const int32_t *row_src, int k, const int32_t *ban, int nban,
                         int32_t also, float *top_lp, int32_t *top_tok, float *also_lp,
                         struct tfm_error *err);
/* Rearrange rows: new row i continues old row keep[i] (an old row may be kept several
 * times or dropped).  nrows <= max_rows. */
int tfm_decoder_select(struct tfm_decoder *d, int nrows, const int32_t *keep,
                       struct tfm_error *err);
/* Steps taken since encode. */
int tfm_decoder_steps(const struct tfm_decoder *d);

#endif
