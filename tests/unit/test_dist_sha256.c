/* test_dist_sha256.c: SHA-256 against the examples of FIPS 180-4 (NIST's example values)
 * and HMAC-SHA256 against the test cases of RFC 4231, the digests the processes of a run
 * prove their secret with (dist.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "sha256.h"

static void hex(const unsigned char *d, size_t n, char *out)
{
    for (size_t i = 0; i < n; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static void check_sha(const char *msg, size_t n, const char *want)
{
    unsigned char d[TFM_SHA256_BYTES];
    char h[2 * TFM_SHA256_BYTES + 1];
    tfm_sha256(msg, n, d);
    hex(d, sizeof d, h);
    CHECK_STR(h, want);
}

static void test_fips(void)
{
    check_sha("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    check_sha("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";   /* 448 bits */
    check_sha(two, strlen(two), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const char *four = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnop"
                       "jklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";                   /* 896 bits */
    check_sha(four, strlen(four),
              "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
    char *a = malloc(1000000);
    CHECK(a != NULL);
    if (!a)
        return;
    memset(a, 'a', 1000000);
    check_sha(a, 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    /* the same million in pieces of every length up to 127 bytes: the block boundaries */
    struct tfm_sha256 s;
    tfm_sha256_init(&s);
    size_t at = 0;
    for (size_t k = 1; at < 1000000; k = k % 127 + 1) {
        size_t m = 1000000 - at < k ? 1000000 - at : k;
        tfm_sha256_update(&s, a + at, m);
        at += m;
    }
    unsigned char d[TFM_SHA256_BYTES];
    char h[2 * TFM_SHA256_BYTES + 1];
    tfm_sha256_final(&s, d);
    hex(d, sizeof d, h);
    CHECK_STR(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(a);
}

/* Every message length from 0 to 130 bytes, so padding into one block or two, and 55, 56
 * and 64 bytes on their own: "0123456789" repeated and cut to the length.  The digest of
 * the 131 digests is Python's hashlib's. */
static void test_lengths(void)
{
    char msg[131];
    for (int i = 0; i < 131; i++)
        msg[i] = (char)('0' + i % 10);
    check_sha(msg, 55, "f34d5a0f80c0cbf84c8c0b90218c22637abd199965249da736a20143c8c9c9d9");
    check_sha(msg, 56, "83aa034bda83e458a0dc9cbce0d4e354716aa0ff770ed37ac0ed2b292052e4af");
    check_sha(msg, 64, "9674d9e078535b7cec43284387a6ee39956188e735a85452b0050b55341cda56");
    unsigned char all[131][TFM_SHA256_BYTES], d[TFM_SHA256_BYTES];
    for (int n = 0; n < 131; n++)
        tfm_sha256(msg, (size_t)n, all[n]);
    char h[2 * TFM_SHA256_BYTES + 1];
    tfm_sha256(all, sizeof all, d);
    hex(d, sizeof d, h);
    CHECK_STR(h, "a1d390c147b46642c880b3e5470441df9b609e6987b82ee7e23f2001957ee38c");
}

static void check_hmac(const void *key, size_t klen, const void *msg, size_t mlen,
                       const char *want)
{
    unsigned char d[TFM_SHA256_BYTES];
    char h[2 * TFM_SHA256_BYTES + 1];
    const void *parts[] = {msg};
    size_t lens[] = {mlen};
    tfm_hmac_sha256(key, klen, parts, lens, 1, d);
    hex(d, sizeof d, h);
    h[strlen(want)] = 0;                /* case 5 is truncated to 128 bits */
    CHECK_STR(h, want);
}

static void test_rfc4231(void)
{
    unsigned char k[131], m[50];
    memset(k, 0x0b, 20);
    check_hmac(k, 20, "Hi There", 8,
               "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    check_hmac("Jefe", 4, "what do ya want for nothing?", 28,
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    memset(k, 0xaa, 20);
    memset(m, 0xdd, 50);
    check_hmac(k, 20, m, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    for (int i = 0; i < 25; i++)
        k[i] = (unsigned char)(i + 1);
    memset(m, 0xcd, 50);
    check_hmac(k, 25, m, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    memset(k, 0x0c, 20);
    check_hmac(k, 20, "Test With Truncation", 20, "a3b6167473100ee06e0c796c2955552b");
    memset(k, 0xaa, 131);
    const char *six = "Test Using Larger Than Block-Size Key - Hash Key First";
    check_hmac(k, 131, six, strlen(six),
               "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    const char *seven = "This is a test using a larger than block-size key and a larger than "
                        "block-size data. The key needs to be hashed before being used by the "
                        "HMAC algorithm.";
    check_hmac(k, 131, seven, strlen(seven),
               "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

/* A message in several parts is the HMAC of their concatenation. */
static void test_parts(void)
{
    const void *parts[] = {"what do ya ", "", "want for nothing?"};
    size_t lens[] = {11, 0, 17};
    unsigned char d[TFM_SHA256_BYTES];
    char h[2 * TFM_SHA256_BYTES + 1];
    tfm_hmac_sha256("Jefe", 4, parts, lens, 3, d);
    hex(d, sizeof d, h);
    CHECK_STR(h, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

int main(void)
{
    t_run("SHA-256: the FIPS 180-4 examples, a million 'a' whole and in pieces", test_fips);
    t_run("SHA-256: every length from 0 to 130 bytes", test_lengths);
    t_run("HMAC-SHA256: RFC 4231 test cases 1 to 7", test_rfc4231);
    t_run("HMAC-SHA256: a message in parts", test_parts);
    return t_done();
}
