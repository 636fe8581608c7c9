/* fuzz_config.c: libFuzzer target for the config parser (make fuzz).  Every input is
 * parsed as a config file on top of the defaults and, when it has no NUL, as one --set
 * override; a config that parses is checked, formatted, parsed back and formatted again,
 * and the two texts must be equal (abort otherwise).  Built with ASan and UBSan; any
 * crash, leak or undefined behavior is a finding. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

/* format(c) parses back to a config that formats the same. */
static void round_trip(const struct tfm_config *c)
{
    struct tfm_error err;
    char *a = tfm_config_format(c);
    if (!a)
        return;
    struct tfm_config d;
    tfm_config_defaults(&d);
    if (tfm_config_parse(&d, a, strlen(a), "formatted", &err) != 0)
        abort();
    char *b = tfm_config_format(&d);
    if (!b || strcmp(a, b) != 0)
        abort();
    int n;
    const struct tfm_config_key *keys = tfm_config_keys(&n);
    for (int i = 0; i < n; i++) {
        char v[64];
        if (tfm_config_get(&d, keys[i].name, v, sizeof v) != 0)
            abort();
    }
    free(a);
    free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tfm_error err;
    struct tfm_config c;
    tfm_config_defaults(&c);
    if (tfm_config_parse(&c, (const char *)data, size, "fuzz", &err) == 0) {
        tfm_config_check(&c, 0, &err);
        tfm_config_check(&c, 1, &err);
        round_trip(&c);
    }
    if (!memchr(data, 0, size)) {
        char *kv = malloc(size + 1);
        if (!kv)
            return 0;
        memcpy(kv, data, size);
        kv[size] = 0;
        tfm_config_defaults(&c);
        if (tfm_config_set(&c, kv, "--set", &err) == 0)
            round_trip(&c);
        free(kv);
    }
    return 0;
}
