/* test_json: the JSON writer's layout (one member a line, or inline), escaping, numbers,
 * and misuse that is recorded rather than written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "json.h"

static void test_layout(void)
{
    FILE *f = tmpfile();
    struct tfm_json j;
    tfm_json_init(&j, f);
    tfm_json_object(&j, 1);
    tfm_json_key(&j, "name");
    tfm_json_str(&j, "BLEU");
    tfm_json_key(&j, "counts");
    tfm_json_array(&j, 0);
    tfm_json_int(&j, 1);
    tfm_json_int(&j, -2);
    tfm_json_int(&j, 9007199254740993LL);
    tfm_json_end(&j);
    tfm_json_key(&j, "all");
    tfm_json_object(&j, 0);
    tfm_json_key(&j, "f1");
    tfm_json_num(&j, 0.5);
    tfm_json_key(&j, "ok");
    tfm_json_bool(&j, 1);
    tfm_json_end(&j);
    tfm_json_key(&j, "rows");
    tfm_json_array(&j, 1);
    tfm_json_object(&j, 0);
    tfm_json_key(&j, "id");
    tfm_json_int(&j, 1);
    tfm_json_end(&j);
    tfm_json_object(&j, 0);
    tfm_json_end(&j);
    tfm_json_end(&j);
    tfm_json_key(&j, "none");
    tfm_json_array(&j, 1);
    tfm_json_end(&j);
    tfm_json_end(&j);
    CHECK_EQ_INT(tfm_json_done(&j), 0);
    CHECK_STR(t_contents(f), "{\n"
                           " \"name\": \"BLEU\",\n"
                           " \"counts\": [1, -2, 9007199254740993],\n"
                           " \"all\": {\"f1\": 0.5, \"ok\": true},\n"
                           " \"rows\": [\n"
                           "  {\"id\": 1},\n"
                           "  {}\n"
                           " ],\n"
                           " \"none\": [\n"
                           " ]\n"
                           "}\n");
    fclose(f);
}

static void test_values(void)
{
    FILE *f = tmpfile();
    struct tfm_json j;
    tfm_json_init(&j, f);
    tfm_json_array(&j, 0);
    tfm_json_str(&j, "a\"b\\c\n\t\x01\x7f Grüße");
    tfm_json_num(&j, 26.33333333333333);
    tfm_json_num(&j, 1e-20);
    tfm_json_num(&j, 0.0 / 0.0);
    tfm_json_num(&j, 1.0 / 0.0);
    tfm_json_num(&j, 100);
    tfm_json_bool(&j, 0);
    tfm_json_end(&j);
    CHECK_EQ_INT(tfm_json_done(&j), 0);
    CHECK_STR(t_contents(f), "[\"a\\\"b\\\\c\\u000a\\u0009\\u0001\x7f Grüße\", 26.33333333333333, 1e-20, "
                           "null, null, 100, false]\n");
    fclose(f);
}

/* Numbers read back as the very doubles written (a score is never rounded), in the fewest
 * digits that do. */
static void test_round_trip(void)
{
    static const double x[] = {26.3, 1.0 / 3, 200.0 / 3, 0.1 + 0.2, 1e-20, 38.81001770873306,
                               -0.0, 4.9e-324, 1.7976931348623157e308};
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) {
        FILE *f = tmpfile();
        struct tfm_json j;
        tfm_json_init(&j, f);
        tfm_json_num(&j, x[i]);
        const char *s = t_contents(f);
        CHECK(strtod(s, NULL) == x[i] && signbit(strtod(s, NULL)) == signbit(x[i]));
        fclose(f);
    }
    FILE *f = tmpfile();
    struct tfm_json j;
    tfm_json_init(&j, f);
    tfm_json_array(&j, 0);
    tfm_json_num(&j, 26.3);
    tfm_json_num(&j, 1.0 / 3);
    tfm_json_num(&j, 0.1 + 0.2);
    tfm_json_end(&j);
    CHECK_STR(t_contents(f), "[26.3, 0.3333333333333333, 0.30000000000000004]\n");
    fclose(f);
}

static void test_misuse(void)
{
    FILE *f = tmpfile();
    struct tfm_json j;
    tfm_json_init(&j, f);
    tfm_json_object(&j, 0);
    tfm_json_int(&j, 1);                /* a value where a key is due: not written */
    tfm_json_key(&j, "k");
    tfm_json_key(&j, "k2");             /* a key where the value is due */
    tfm_json_int(&j, 2);
    tfm_json_end(&j);
    CHECK_EQ_INT(tfm_json_done(&j), -1);
    CHECK_STR(t_contents(f), "{\"k\": 2}\n");
    tfm_json_init(&j, f);               /* not closed */
    tfm_json_array(&j, 0);
    CHECK_EQ_INT(tfm_json_done(&j), -1);
    tfm_json_init(&j, f);               /* an end with nothing open; two documents */
    tfm_json_end(&j);
    CHECK_EQ_INT(tfm_json_done(&j), -1);
    tfm_json_init(&j, f);
    tfm_json_int(&j, 1);
    tfm_json_int(&j, 2);
    CHECK_EQ_INT(tfm_json_done(&j), -1);
    tfm_json_init(&j, f);               /* too deep */
    for (int i = 0; i < TFM_JSON_DEPTH + 2; i++)
        tfm_json_array(&j, 0);
    CHECK(j.depth < TFM_JSON_DEPTH);
    CHECK_EQ_INT(tfm_json_done(&j), -1);
    fclose(f);
}

int main(void)
{
    t_run("layout: lines and inline containers", test_layout);
    t_run("strings escaped, numbers unrounded, null when not finite", test_values);
    t_run("numbers read back as the doubles written, in the fewest digits", test_round_trip);
    t_run("misuse is recorded, not written", test_misuse);
    return t_done();
}
