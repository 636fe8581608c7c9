/* sha256.h: SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the processes' proof of
 * their run's secret when they meet (dist.c).  Byte strings in, 32-byte digests out.
 * Not here: randomness (getrandom), constant-time comparison of digests (the caller's). */
#ifndef TFM_SHA256_H
#define TFM_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define TFM_SHA256_BYTES 32

struct tfm_sha256 {
    uint32_t h[8];
    uint64_t bytes;             /* message bytes so far */
    unsigned char block[64];
    size_t fill;                /* bytes of block in use */
};

void tfm_sha256_init(struct tfm_sha256 *s);
void tfm_sha256_update(struct tfm_sha256 *s, const void *p, size_t n);
void tfm_sha256_final(struct tfm_sha256 *s, unsigned char out[TFM_SHA256_BYTES]);
void tfm_sha256(const void *p, size_t n, unsigned char out[TFM_SHA256_BYTES]);

/* HMAC-SHA256 of the concatenation of the n parts msg[i] (len[i] bytes each) under key. */
void tfm_hmac_sha256(const void *key, size_t key_len, const void *const *msg,
                     const size_t *len, int n, unsigned char out[TFM_SHA256_BYTES]);

#endif
