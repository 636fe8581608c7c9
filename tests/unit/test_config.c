/* test_config.c: the config key table, parser, overrides and formatter (config.h), and
 * the shipped configs/ files. */
#include "check.h"

#include "config.h"

#include <stddef.h>

static void test_defaults_valid(void)
{
    int n;
    const struct tfm_config_key *k = tfm_config_keys(&n);
    CHECK(n > 20);
    struct tfm_config c;
    tfm_config_defaults(&c);
    struct tfm_error err;
    /* every default parses under its own rules */
    for (int i = 0; i < n; i++) {
        char kv[128];
        snprintf(kv, sizeof kv, "%s=%s", k[i].name, k[i].def);
        CHECK(tfm_config_set(&c, kv, "--set", &err) == 0);
        CHECK(k[i].doc && k[i].doc[0]);
    }
    CHECK_EQ_INT(c.d_model, 512);
    CHECK_EQ_INT(c.layers, 6);
    CHECK_NEAR(c.adam_beta2, 0.98, 0);
    CHECK_NEAR(c.adam_eps, 1e-9, 0);
    CHECK_EQ_INT(c.warmup, 4000);
    CHECK_EQ_INT(c.norm, TFM_NORM_POST);
    CHECK(tfm_config_check(&c, 0, &err) == 0);
    CHECK(tfm_config_check(&c, 1, &err) < 0);       /* vocab 0 */
    CHECK(strstr(err.msg, "vocab") != NULL);
}

static void test_parse(void)
{
    struct tfm_config c;
    struct tfm_error err;
    tfm_config_defaults(&c);
    const char *t = "# a comment\n  d_model = 256  \n\nnorm=pre # trailing\r\ndropout = 0.3\n"
                    "layers = 4\nlayers = 3\n";
    CHECK(tfm_config_parse(&c, t, strlen(t), "x.conf", &err) == 0);
    CHECK_EQ_INT(c.d_model, 256);
    CHECK_EQ_INT(c.norm, TFM_NORM_PRE);
    CHECK_NEAR(c.dropout, 0.3, 0);
    CHECK_EQ_INT(c.layers, 3);
    /* as saved by an editor that starts UTF-8 with a byte order mark, CRLF, no final
     * newline: the mark is no part of the first key */
    t = "\xef\xbb\xbflayers = 5\r\nheads = 2\r\nd_ff = 100";
    CHECK(tfm_config_parse(&c, t, strlen(t), "bom.conf", &err) == 0);
    CHECK_EQ_INT(c.layers, 5);
    CHECK_EQ_INT(c.heads, 2);
    CHECK_EQ_INT(c.d_ff, 100);
    /* only at the start: elsewhere it is part of a key, an unknown one */
    t = "layers = 5\n\xef\xbb\xbfheads = 2\n";
    CHECK(tfm_config_parse(&c, t, strlen(t), "bom.conf", &err) < 0);
    CHECK_STR(err.msg, "bom.conf:2: key '\xef\xbb\xbfheads': unknown key");
}

static void test_errors(void)
{
    struct tfm_config c;
    struct tfm_error err;
    tfm_config_defaults(&c);
    const char *t = "d_model = 256\ndrpout = 0.3\n";
    CHECK(tfm_config_parse(&c, t, strlen(t), "x.conf", &err) < 0);
    CHECK_STR(err.msg, "x.conf:2: key 'drpout': unknown key");
    t = "\n\nheads = 8x\n";
    CHECK(tfm_config_parse(&c, t, strlen(t), "y.conf", &err) < 0);
    CHECK_STR(err.msg, "y.conf:3: key 'heads': '8x' is not an integer");
    /* numbers are decimal: no hex float, no inf; one too small to keep is out of range */
    t = "lr_scale = 0x1p-3\n";
    CHECK(tfm_config_parse(&c, t, strlen(t), "h.conf", &err) < 0);
    CHECK_STR(err.msg, "h.conf:1: key 'lr_scale': '0x1p-3' is not a number");
    t = "heads = 0x8\n";
    CHECK(tfm_config_parse(&c, t, strlen(t), "h.conf", &err) < 0);
    CHECK_STR(err.msg, "h.conf:1: key 'heads': '0x8' is not an integer");
    t = "dropout = inf\n";
    CHECK(tfm_config_parse(&c, t, strlen(t), "h.conf", &err) < 0);
    CHECK_STR(err.msg, "h.conf:1: key 'dropout': 'inf' is not a number");
    t = "dropout = 1e-400\n";
    CHECK(tfm_config_parse(&c, t, strlen(t), "h.conf", &err) < 0);
    CHECK(strstr(err.msg, "h.conf:1: key 'dropout': 1e-400 is out of range") == err.msg);
    t = "dropout = 1.5\n";
    CHECK(tfm_config_parse(&c, t, strlen(t), "z.conf", &err) < 0);
    CHECK(strstr(err.msg, "z.conf:1: key 'dropout': 1.5 is out of range") == err.msg);
    t = "layers 6\n";
    CHECK(tfm_config_parse(&c, t, strlen(t), "w.conf", &err) < 0);
    CHECK(strstr(err.msg, "w.conf:1: expected 'key = value'") == err.msg);
    /* a binary file: its bytes escaped in the message */
    static const char bin[] = "\x7f" "ELF\x02\x01\x01\x1b[2J\n";
    CHECK(tfm_config_parse(&c, bin, sizeof bin - 1, "b.conf", &err) < 0);
    CHECK_STR(err.msg, "b.conf:1: expected 'key = value', got '\\x7fELF\\x02\\x01\\x01\\x1b[2J'");
    /* a NUL byte: the message names the key, as every other error of a line does */
    static const char nul_value[] = "layers = 2\ndropout = 0.\0" "1\n";
    CHECK(tfm_config_parse(&c, nul_value, sizeof nul_value - 1, "n.conf", &err) < 0);
    CHECK_STR(err.msg, "n.conf:2: key 'dropout': NUL byte in value");
    static const char nul_key[] = "drop\0out = 0.1\n";
    CHECK(tfm_config_parse(&c, nul_key, sizeof nul_key - 1, "n.conf", &err) < 0);
    CHECK_STR(err.msg, "n.conf:1: key 'drop\\x00out': unknown key");
    static const char nul_line[] = "\0\0\0\n";
    CHECK(tfm_config_parse(&c, nul_line, sizeof nul_line - 1, "n.conf", &err) < 0);
    CHECK_STR(err.msg, "n.conf:1: expected 'key = value', got '\\x00\\x00\\x00'");
    CHECK(tfm_config_set(&c, "norm=middle", "--set", &err) < 0);
    CHECK_STR(err.msg, "--set norm=middle: key 'norm': 'middle' is not one of post|pre");
    CHECK(tfm_config_set(&c, "lr_scale=nan", "--set", &err) < 0);
    CHECK(tfm_config_set(&c, "alpha=", "--set", &err) < 0);
    CHECK(tfm_config_set(&c, "warmup=99999999999", "--set", &err) < 0);
    CHECK(strstr(err.msg, "out of range") != NULL);
    /* the bounds in the message as the table has them, shortest form */
    CHECK(tfm_config_set(&c, "ln_eps=0", "--set", &err) < 0);
    CHECK_STR(err.msg, "--set ln_eps=0: key 'ln_eps': 0 is out of range [1e-12, 1]");
    /* Adam's epsilon of 0 (or below fp32's range) is 0/0 for a zero gradient; a beta2
     * that is 1 in fp32 divides its bias correction by 0 */
    CHECK(tfm_config_set(&c, "adam_eps=0", "--set", &err) < 0);
    CHECK_STR(err.msg, "--set adam_eps=0: key 'adam_eps': 0 is out of range [1e-30, 1]");
    CHECK(tfm_config_set(&c, "adam_eps=1e-50", "--set", &err) < 0);
    CHECK(tfm_config_set(&c, "adam_eps=1e-30", "--set", &err) == 0);
    CHECK((float)c.adam_eps > 0);
    CHECK(tfm_config_set(&c, "adam_beta2=0.99999999", "--set", &err) < 0);
    CHECK_STR(err.msg, "--set adam_beta2=0.99999999: key 'adam_beta2': 0.99999999 is out of "
                       "range [0, 0.9999999]");
    CHECK(tfm_config_set(&c, "adam_beta2=0.9999999", "--set", &err) == 0);
    CHECK((float)c.adam_beta2 < 1.0f);
    /* the decoding keys take the ranges of tfm-decode's options, which read them from
     * the table: a beam tfm-decode --beam takes, --set beam takes */
    CHECK(tfm_config_set(&c, "beam=4096", "--set", &err) == 0);
    CHECK(tfm_config_set(&c, "beam=4097", "--set", &err) < 0);
    CHECK_STR(err.msg, "--set beam=4097: key 'beam': 4097 is out of range [1, 4096]");
    CHECK(tfm_config_set(&c, "max_len_b=1048576", "--set", &err) == 0);
    CHECK(tfm_config_set(&c, "min_len=1048576", "--set", &err) == 0);
    CHECK(tfm_config_set(&c, "min_len=1048577", "--set", &err) < 0);
    CHECK(tfm_config_load(&c, "/nonexistent/x.conf", &err) < 0);
    CHECK(strstr(err.msg, "/nonexistent/x.conf: ") == err.msg);
    CHECK(tfm_config_load(&c, "/", &err) < 0);          /* the reason, not "read error" */
    CHECK_STR(err.msg, "/: Is a directory");
    /* the size limit, at its edge: 1 MiB less a byte of comments loads, 1 MiB does not */
    char big[] = "/tmp/test_config.XXXXXX";
    int fd = mkstemp(big);
    CHECK(fd >= 0);
    if (fd >= 0) {
        static char hashes[(1 << 20) + 1];
        memset(hashes, '#', sizeof hashes);
        CHECK(write(fd, hashes, (1 << 20) - 1) == (1 << 20) - 1);
        CHECK(tfm_config_load(&c, big, &err) == 0);
        CHECK(write(fd, hashes, 1) == 1);
        CHECK(tfm_config_load(&c, big, &err) < 0);
        char want[256];
        snprintf(want, sizeof want, "%s: 1 MiB or more: not a config file", big);
        CHECK_STR(err.msg, want);
        close(fd);
        unlink(big);
    }
    /* relations */
    tfm_config_defaults(&c);
    c.heads = 7;
    CHECK(tfm_config_check(&c, 0, &err) < 0);
    CHECK(strstr(err.msg, "heads 7") != NULL);
}

static void test_roundtrip(void)
{
    struct tfm_config c, d;
    struct tfm_error err;
    tfm_config_defaults(&c);
    c.dropout = 0.1 + 0.2;      /* not exactly representable as a short decimal */
    c.norm = TFM_NORM_PRE;
    c.pos = TFM_POS_LEARNED;
    c.vocab = 37000;
    char *t = tfm_config_format(&c);
    CHECK(t != NULL);
    CHECK(strstr(t, "norm = pre\n") != NULL);
    CHECK(strstr(t, "pos = learned\n") != NULL);
    CHECK(strstr(t, "d_model = 512\n") != NULL);
    tfm_config_defaults(&d);
    CHECK(tfm_config_parse(&d, t, strlen(t), "fmt", &err) == 0);
    CHECK(memcmp(&c, &d, sizeof c) == 0);
    char v[64];
    CHECK(tfm_config_get(&d, "dropout", v, sizeof v) == 0);
    CHECK_STR(v, "0.30000000000000004");
    CHECK(tfm_config_get(&d, "nope", v, sizeof v) < 0);
    free(t);
}

/* The shipped configs load and pass the checks; spot values from the paper (Table 3,
 * section 6; tfm-config(5)). */
static void test_shipped(void)
{
    const char *root = getenv("TFM_ROOT");
    char path[4096];
    struct {
        const char *name;
        int layers, d_model, d_ff, heads, beam;
        double dropout, alpha;
        int max_len_b;
    } want[] = {
        {"tiny", 2, 64, 256, 4, 4, 0.1, 0.6, 50},
        {"base", 6, 512, 2048, 8, 4, 0.1, 0.6, 50},
        {"big", 6, 1024, 4096, 16, 4, 0.3, 0.6, 50},
        {"big-enfr", 6, 1024, 4096, 16, 4, 0.1, 0.6, 50},
        {"parse", 4, 1024, 4096, 16, 21, 0.3, 0.3, 300},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct tfm_config c;
        struct tfm_error err;
        tfm_config_defaults(&c);
        snprintf(path, sizeof path, "%s/configs/%s.conf", root ? root : ".", want[i].name);
        if (tfm_config_load(&c, path, &err) < 0) {
            printf("#   %s\n", err.msg);
            CHECK(0);
            continue;
        }
        CHECK(tfm_config_check(&c, 0, &err) == 0);
        CHECK_EQ_INT(c.layers, want[i].layers);
        CHECK_EQ_INT(c.d_model, want[i].d_model);
        CHECK_EQ_INT(c.d_ff, want[i].d_ff);
        CHECK_EQ_INT(c.heads, want[i].heads);
        CHECK_EQ_INT(c.beam, want[i].beam);
        CHECK_NEAR(c.dropout, want[i].dropout, 0);
        CHECK_NEAR(c.alpha, want[i].alpha, 0);
        CHECK_EQ_INT(c.max_len_b, want[i].max_len_b);
    }
}

int main(void)
{
    t_run("every key's default is valid; paper defaults", test_defaults_valid);
    t_run("parse: comments, spaces, repeats", test_parse);
    t_run("errors name the file:line and key", test_errors);
    t_run("format then parse gives the same config", test_roundtrip);
    t_run("configs/*.conf load with the paper's values", test_shipped);
    return t_done();
}
