// spm.cc: the C API of spm.h over SentencePiece 0.1.97 (Debian's libsentencepiece).
//
// The only C++ in tfm.  Everything here catches C++ exceptions at the C boundary and
// turns SentencePiece's util::Status into a struct tfm_error.  Not here: text files,
// streams (beyond reading the model embedded in one), threads.
#include "spm.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

extern "C" {
#include "stream.h"
#include "util.h"
}

namespace sp = sentencepiece;

// The largest .model file we read (as the largest tfm.spm record): this only bounds what
// a wrong path can make us allocate.
static const long MAX_MODEL_BYTES = (long)TFM_MAX_SPM;

struct tfm_spm {
    sp::SentencePieceProcessor proc;
    std::string proto;  // the serialized ModelProto it was loaded from
    int size = 0;
};

// SentencePiece messages look like "./src/trainer_interface.cc(660) [(a) == (b)] Reason."
// Keep the reason.
static std::string clean_message(const char *m)
{
    std::string s = m ? m : "";
    if (s.rfind("./src/", 0) == 0 || s.rfind("src/", 0) == 0) {
        size_t p = s.find(") ");
        if (p != std::string::npos)
            s = s.substr(p + 2);
        if (!s.empty() && s[0] == '[') {   // a failed check: keep it if that is all
            size_t q = s.find("] ");
            if (q != std::string::npos && s.find_first_not_of(" ", q + 2) != std::string::npos)
                s = s.substr(q + 2);
            else if (s.back() == ' ')
                s.pop_back();
        }
    }
    return s;
}

static int fail_status(struct tfm_error *err, const sp::util::Status &st)
{
    return tfm_fail(err, "%s", clean_message(st.message()).c_str());
}

extern "C" struct tfm_spm *tfm_spm_load(const void *proto, size_t n, struct tfm_error *err)
{
    try {
        if (n == 0 || !proto) {
            tfm_fail(err, "empty SentencePiece model");
            return nullptr;
        }
        tfm_spm *s = new tfm_spm;
        s->proto.assign(static_cast<const char *>(proto), n);
        sp::util::Status st = s->proc.LoadFromSerializedProto(s->proto);
        if (!st.ok()) {
            std::string m = clean_message(st.message());
            if (!m.empty() && m[0] == '[')      // a parse check of protobuf: says nothing more
                m.clear();
            tfm_fail(err, "not a SentencePiece model%s%s%s", m.empty() ? "" : " (", m.c_str(),
                     m.empty() ? "" : ")");
            delete s;
            return nullptr;
        }
        s->size = s->proc.GetPieceSize();
        int pad = s->proc.pad_id(), unk = s->proc.unk_id(), bos = s->proc.bos_id(),
            eos = s->proc.eos_id();
        if (pad != TFM_PAD_ID || unk != TFM_UNK_ID || bos != TFM_BOS_ID || eos != TFM_EOS_ID) {
            tfm_fail(err,
                     "SentencePiece model has pad=%d unk=%d bos=%d eos=%d, tfm needs "
                     "pad=0 unk=1 bos=2 eos=3 (train it with tfm-tokenize train, or "
                     "spm_train --pad_id=0 --unk_id=1 --bos_id=2 --eos_id=3)",
                     pad, unk, bos, eos);
            delete s;
            return nullptr;
        }
        return s;
    } catch (const std::exception &e) {
        tfm_fail(err, "SentencePiece: %s", e.what());
        return nullptr;
    }
}

// read(2) until n bytes or the end of the input: the count, or -1 with errno.
static ssize_t read_full(int fd, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, buf + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        got += (size_t)k;
    }
    return (ssize_t)got;
}

// The model in fd, named path: a tfm stream is told by its first 8 bytes and read by the
// stream reader, which is handed them back; anything else is read to its end as a .model
// file, after them.  The input is read once, front to back, so a pipe or a FIFO works.
static struct tfm_spm *load_fd(int fd, const char *path, struct tfm_error *err)
{
    char magic[8];
    ssize_t got = read_full(fd, magic, sizeof magic);
    if (got < 0) {
        tfm_fail(err, "%s: %s", path, strerror(errno));
        return nullptr;
    }
    if (tfm_is_stream_magic(magic, (size_t)got)) {
        struct tfm_reader *r = tfm_reader_open_peeked(fd, path, magic, (size_t)got, err);
        if (!r)
            return nullptr;
        const struct tfm_header *h = tfm_reader_header(r);
        if (!h->spm) {
            tfm_fail(err, "%s: a '%s' stream without an embedded SentencePiece model", path,
                     h->kind);
            tfm_reader_close(r);
            return nullptr;
        }
        struct tfm_spm *s = tfm_spm_load(h->spm, h->spm_size, err);
        tfm_reader_close(r);
        if (!s)
            tfm_error_prefix(err, "%s: embedded model", path);
        return s;
    }
    std::string bytes(magic, (size_t)got);
    char buf[1 << 16];
    ssize_t k;
    while ((k = read_full(fd, buf, sizeof buf)) > 0) {
        if ((long)(bytes.size() + (size_t)k) > MAX_MODEL_BYTES) {
            tfm_fail(err, "%s: larger than %ld bytes, not a SentencePiece model", path,
                     MAX_MODEL_BYTES);
            return nullptr;
        }
        bytes.append(buf, (size_t)k);
    }
    if (k < 0) {
        tfm_fail(err, "%s: %s", path, strerror(errno));
        return nullptr;
    }
    if (bytes.empty()) {
        tfm_fail(err, "%s: empty file, not a SentencePiece model", path);
        return nullptr;
    }
    struct tfm_spm *s = tfm_spm_load(bytes.data(), bytes.size(), err);
    if (!s)
        tfm_error_prefix(err, "%s", path);
    return s;
}

extern "C" struct tfm_spm *tfm_spm_load_file(const char *path, struct tfm_error *err)
{
    /* "-": standard input, as for every input of the tools, named as the stream reader
     * names it */
    bool in = strcmp(path, "-") == 0;
    if (in)
        path = "<stdin>";
    int fd = in ? 0 : open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        tfm_fail(err, "%s: %s", path, strerror(errno));
        return nullptr;
    }
    struct tfm_spm *s = nullptr;
    try {
        s = load_fd(fd, path, err);
    } catch (const std::exception &e) {
        tfm_fail(err, "%s: %s", path, e.what());
    }
    if (!in)
        close(fd);
    return s;
}

extern "C" void tfm_spm_free(struct tfm_spm *s)
{
    delete s;
}

extern "C" int tfm_spm_vocab_size(const struct tfm_spm *s)
{
    return s->size;
}

extern "C" int tfm_spm_proto_vocab_size(const void *proto, size_t n, struct tfm_error *err)
{
    struct tfm_spm *s = tfm_spm_load(proto, n, err);
    if (!s)
        return -1;
    int size = s->size;
    tfm_spm_free(s);
    return size;
}

extern "C" const void *tfm_spm_proto(const struct tfm_spm *s, size_t *n)
{
    *n = s->proto.size();
    return s->proto.data();
}

extern "C" const char *tfm_spm_piece(const struct tfm_spm *s, int id)
{
    if (id < 0 || id >= s->size)
        return nullptr;
    return s->proc.IdToPiece(id).c_str();
}

static_assert(sizeof(int) == sizeof(int32_t), "SentencePiece ids are int");

extern "C" int64_t tfm_spm_encode(const struct tfm_spm *s, const char *text, size_t len,
                                  int32_t **ids, int64_t *cap, struct tfm_error *err)
{
    try {
        thread_local std::vector<int> v;    // reused: one allocation per thread, not per line
        sp::util::Status st = s->proc.Encode(std::string_view(text, len), &v);
        if (!st.ok())
            return fail_status(err, st);
        int64_t n = (int64_t)v.size();
        if (n > *cap || !*ids) {
            int64_t c = *cap > 0 ? *cap : 64;
            while (c < n)
                c *= 2;
            void *p = realloc(*ids, (size_t)c * sizeof(int32_t));
            if (!p)
                return tfm_fail(err, "out of memory for %lld token ids", (long long)n);
            *ids = static_cast<int32_t *>(p);
            *cap = c;
        }
        if (n)
            memcpy(*ids, v.data(), (size_t)n * sizeof(int32_t));
        return n;
    } catch (const std::exception &e) {
        return tfm_fail(err, "SentencePiece: %s", e.what());
    }
}

extern "C" int64_t tfm_spm_decode(const struct tfm_spm *s, const int32_t *ids, int64_t n,
                                  char **out, size_t *cap, struct tfm_error *err)
{
    try {
        thread_local std::vector<int> v;
        thread_local std::string text;
        v.resize((size_t)n);
        for (int64_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= s->size)
                return tfm_fail(err, "id %d at position %lld outside the vocabulary (%d)",
                                ids[i], (long long)i, s->size);
            v[(size_t)i] = ids[i];
        }
        sp::util::Status st = s->proc.Decode(v, &text);
        if (!st.ok())
            return fail_status(err, st);
        size_t need = text.size() + 1;
        if (need > *cap || !*out) {
            size_t c = *cap > 0 ? *cap : 256;
            while (c < need)
                c *= 2;
            void *p = realloc(*out, c);
            if (!p)
                return tfm_fail(err, "out of memory for %zu bytes of text", need);
            *out = static_cast<char *>(p);
            *cap = c;
        }
        memcpy(*out, text.data(), text.size());
        (*out)[text.size()] = 0;
        return (int64_t)text.size();
    } catch (const std::exception &e) {
        return tfm_fail(err, "SentencePiece: %s", e.what());
    }
}

// ---- training ----------------------------------------------------------------------

namespace {
// Feeds the trainer from the caller's callback; an error stops it with our message.
class CallbackIterator : public sp::SentenceIterator {
public:
    CallbackIterator(tfm_spm_next_fn next, void *ctx) : next_(next), ctx_(ctx) { Next(); }
    bool done() const override { return done_; }
    void Next() override
    {
        if (done_)
            return;
        const char *line = nullptr;
        size_t len = 0;
        struct tfm_error e;
        e.msg[0] = 0;
        int k = next_(ctx_, &line, &len, &e);
        if (k == 1) {
            value_.assign(line, len);
        } else {
            done_ = true;
            if (k < 0)
                status_ = sp::util::Status(sp::util::StatusCode::kInvalidArgument, e.msg);
        }
    }
    const std::string &value() const override { return value_; }
    sp::util::Status status() const override { return status_; }

private:
    tfm_spm_next_fn next_;
    void *ctx_;
    std::string value_;
    bool done_ = false;
    sp::util::Status status_;
};

// Input that ends at once, and says whether the trainer came to read it: it had taken
// its options by then (tfm_spm_train_option_check).
class ProbeIterator : public sp::SentenceIterator {
public:
    bool done() const override
    {
        reached_ = true;
        return true;
    }
    void Next() override {}
    const std::string &value() const override { return value_; }
    sp::util::Status status() const override
    {
        return sp::util::Status(sp::util::StatusCode::kCancelled, "options checked");
    }
    bool reached() const { return reached_; }

private:
    mutable bool reached_ = false;
    std::string value_;
};

// A line of a sample, and its place among the lines it was drawn from.
struct SampledLine {
    int64_t n;
    std::string text;
};

// Feeds the trainer a sample drawn beforehand, freeing each line once the trainer has
// taken its copy: the sample is not held twice.
class SampleIterator : public sp::SentenceIterator {
public:
    explicit SampleIterator(std::vector<SampledLine> &lines) : lines_(lines) {}
    bool done() const override { return i_ >= lines_.size(); }
    void Next() override
    {
        if (i_ < lines_.size())
            std::string().swap(lines_[i_++].text);
    }
    const std::string &value() const override { return lines_[i_].text; }
    sp::util::Status status() const override { return sp::util::Status(); }

private:
    std::vector<SampledLine> &lines_;
    size_t i_ = 0;
};
}  // namespace

// A uniform sample of k of the lines next gives that the trainer would keep (not empty,
// at most max_len bytes), in input order: reservoir sampling (Algorithm R) with tfm's
// splitmix64 seeded by seed, so the same lines and seed give the same sample.  All of them
// when there are no more than k.  0, or -1 with the callback's error.
static int sample_lines(tfm_spm_next_fn next, void *ctx, int64_t k, uint64_t seed,
                        size_t max_len, std::vector<SampledLine> *out, struct tfm_error *err)
{
    uint64_t rng = seed;
    int64_t seen = 0;
    for (;;) {
        const char *line = nullptr;
        size_t len = 0;
        int r = next(ctx, &line, &len, err);
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        if (len == 0 || len > max_len)
            continue;
        if (seen < k) {
            out->push_back({seen, std::string(line, len)});
        } else {
            uint64_t j = tfm_rng_below(&rng, (uint64_t)seen + 1);
            if (j < (uint64_t)k) {
                (*out)[j].n = seen;
                (*out)[j].text.assign(line, len);
            }
        }
        seen++;
    }
    std::sort(out->begin(), out->end(),
              [](const SampledLine &a, const SampledLine &b) { return a.n < b.n; });
    return 0;
}

// Trainer fields that tfm sets itself (the ids, where the input comes from) or that have
// a flag of their own.
static const char *const FIXED_KEYS[] = {
    "input", "input_format", "model_prefix", "pad_id", "unk_id", "bos_id", "eos_id",
    "vocab_size", "model_type", "character_coverage", "input_sentence_size", "num_threads",
    "shuffle_input_sentence",
};

extern "C" void tfm_spm_train_defaults(struct tfm_spm_train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->type = "bpe";
    o->vocab_size = 8000;
    o->coverage = 0.9995;
    o->max_sentences = 0;
    o->seed = 1;
    o->threads = 1;
}

extern "C" int tfm_spm_train_option_check(const char *kv, struct tfm_error *err)
{
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv)
        return tfm_fail(err, "'%s': trainer option must be KEY=VALUE", kv);
    std::string key(kv, (size_t)(eq - kv));
    if (key.rfind("--", 0) == 0)
        key = key.substr(2);
    for (const char *k : FIXED_KEYS)
        if (key == k)
            return tfm_fail(err, "'%s': trainer option %s is set by tfm-tokenize itself", kv,
                            k);
    const char *value = eq + 1;
    if (key == "minloglevel") {     // the trainer's log level, global: not tried below
        char *end;
        errno = 0;
        long v = strtol(value, &end, 10);
        if (!*value || *end || errno || v < INT_MIN || v > INT_MAX)
            return tfm_fail(err, "'%s': an integer expected", kv);
        return 0;
    }
    // The option tried by the trainer itself, on input that ends at once (the protobuf
    // specs are not in the library's headers, so not MergeSpecsFromArgs alone): an
    // unknown key, a value it cannot parse (split_digits=maybe) or out of its range is
    // refused before it reaches the input; this way before the corpus is read.
    try {
        std::unordered_map<std::string, std::string> kw = {
            {"model_type", "bpe"}, {"vocab_size", "8000"}, {"input_sentence_size", "0"},
            {"pad_id", "0"}, {"unk_id", "1"}, {"bos_id", "2"}, {"eos_id", "3"},
            {"minloglevel", "2"},
        };
        kw[key] = value;
        ProbeIterator it;
        std::string out;
        sp::util::Status st = sp::SentencePieceTrainer::Train(kw, &it, &out);
        if (!st.ok() && !it.reached())
            return tfm_fail(err, "'%s': %s", kv, clean_message(st.message()).c_str());
    } catch (const std::exception &e) {
        return tfm_fail(err, "'%s': %s", kv, e.what());
    }
    return 0;
}

extern "C" size_t tfm_spm_train_max_line(const struct tfm_spm_train_opts *o)
{
    size_t max_len = 4192;      // SentencePiece's default max_sentence_length
    for (int i = 0; i < o->noptions; i++) {
        const char *kv = o->options[i];
        if (strncmp(kv, "--", 2) == 0)
            kv += 2;
        const char *key = "max_sentence_length=";
        if (strncmp(kv, key, strlen(key)) != 0)
            continue;
        const char *v = kv + strlen(key);
        char *end;
        long long x = strtoll(v, &end, 10);
        if (*end == 0 && end != v && x > 0)
            max_len = (size_t)x;    // the last one given counts, as in the trainer's map
    }
    return max_len;
}

// "Vocabulary size too high (A). Please set it to a value <= B." -> a message that says
// what to do about it in tfm-tokenize's terms.
static int fail_train(struct tfm_error *err, const sp::util::Status &st)
{
    std::string m = clean_message(st.message());
    long long asked = 0, most = 0;
    size_t p = m.find("Vocabulary size too high");
    if (p != std::string::npos &&
        sscanf(m.c_str() + p, "Vocabulary size too high (%lld). Please set it to a value <= %lld",
               &asked, &most) == 2)
        return tfm_fail(err,
                        "vocabulary size %lld too high for this corpus (at most %lld pieces); "
                        "use a smaller --vocab, or --trainer-option hard_vocab_limit=false "
                        "to accept a smaller vocabulary",
                        asked, most);
    return tfm_fail(err, "SentencePiece trainer: %s", m.c_str());
}

static std::string number(double x)
{
    char b[64];
    snprintf(b, sizeof b, "%.17g", x);
    return b;
}

extern "C" int tfm_spm_train(const struct tfm_spm_train_opts *o, tfm_spm_next_fn next,
                             void *ctx, void **proto, size_t *n, struct tfm_error *err)
{
    *proto = nullptr;
    *n = 0;
    try {
        if (strcmp(o->type, "bpe") != 0 && strcmp(o->type, "unigram") != 0)
            return tfm_fail(err, "model type '%s': bpe or unigram expected", o->type);
        if (o->vocab_size < 5)
            return tfm_fail(err, "vocabulary size %d: at least 5 expected", o->vocab_size);
        if (o->max_sentences < 0)
            return tfm_fail(err, "sentence sample of %lld: 0 (all) or more expected",
                            (long long)o->max_sentences);
        if (!(o->coverage >= TFM_SPM_COVERAGE_MIN && o->coverage <= 1))
            return tfm_fail(err, "character coverage %g: [%g, 1] expected", o->coverage,
                            TFM_SPM_COVERAGE_MIN);
        std::unordered_map<std::string, std::string> kw = {
            {"model_type", o->type},
            {"vocab_size", std::to_string(o->vocab_size)},
            {"character_coverage", number(o->coverage)},
            {"input_sentence_size", "0"},       // the sample is drawn here
            {"num_threads", std::to_string(o->threads > 0 ? o->threads : 1)},
            {"pad_id", "0"}, {"unk_id", "1"}, {"bos_id", "2"}, {"eos_id", "3"},
            {"minloglevel", o->verbose ? "0" : "2"},
        };
        for (int i = 0; i < o->noptions; i++) {
            if (tfm_spm_train_option_check(o->options[i], err))
                return -1;
            const char *kv = o->options[i];
            const char *eq = strchr(kv, '=');
            std::string key(kv, (size_t)(eq - kv));
            if (key.rfind("--", 0) == 0)
                key = key.substr(2);
            kw[key] = eq + 1;
        }
        // SentencePiece's own sampler ignores SetRandomGeneratorSeed: the sample is drawn
        // here, of the lines its trainer keeps (max_sentence_length: 4192 bytes unless
        // given), and it trains on all of it.
        std::string out;
        sp::util::Status st;
        if (o->max_sentences > 0) {
            size_t max_len = tfm_spm_train_max_line(o);
            std::vector<SampledLine> sample;
            if (sample_lines(next, ctx, o->max_sentences, o->seed, max_len, &sample, err))
                return -1;
            SampleIterator it(sample);
            st = sp::SentencePieceTrainer::Train(kw, &it, &out);
        } else {
            CallbackIterator it(next, ctx);
            st = sp::SentencePieceTrainer::Train(kw, &it, &out);
            // The iterator's own error (a bad line) comes back as it was written.
            if (!st.ok() && !it.status().ok())
                return tfm_fail(err, "%s", it.status().message());
        }
        if (!st.ok())
            return fail_train(err, st);
        if (out.empty())
            return tfm_fail(err, "SentencePiece trainer returned an empty model");
        void *p = malloc(out.size());
        if (!p)
            return tfm_fail(err, "out of memory for a model of %zu bytes", out.size());
        memcpy(p, out.data(), out.size());
        *proto = p;
        *n = out.size();
        return 0;
    } catch (const std::exception &e) {
        return tfm_fail(err, "SentencePiece trainer: %s", e.what());
    }
}
