/* test_device.c: device choice.  On a machine without a GPU (this one, CI), a CUDA build
 * must start, report why, and fall back to the CPU for "auto"; "cuda" must be an error. */
#include "check.h"
#include "device.h"

static void test_cpu(void)
{
    struct tfm_device d;
    struct tfm_error err;
    CHECK(tfm_device_choose("cpu", &d, &err) == 0);
    CHECK_EQ_INT(d.kind, TFM_DEVICE_CPU);
    CHECK(tfm_device_choose("tpu", &d, &err) == -1);
    CHECK(strstr(err.msg, "unknown device 'tpu'") != NULL);
}

static void test_auto(void)
{
    struct tfm_device d;
    struct tfm_error err;
    char msg[384];
    int n = tfm_device_cuda_count(msg, sizeof msg);
    printf("# %s\n", msg);
    CHECK(tfm_device_choose("auto", &d, &err) == 0);
    printf("# %s\n", d.note);
    if (n == 0) {
        CHECK_EQ_INT(d.kind, TFM_DEVICE_CPU);
        CHECK(strstr(d.note, "device: cpu, no GPU found") != NULL);
        CHECK(tfm_device_choose("cuda", &d, &err) == -1);
        CHECK(strstr(err.msg, "no CUDA device") != NULL);
    } else {
        CHECK_EQ_INT(d.kind, TFM_DEVICE_CUDA);
        CHECK_EQ_INT(d.count, n);
    }
#ifdef TFM_CUDA
    CHECK(strstr(msg, "CUDA runtime") != NULL);   /* linked against the real libraries */
#else
    CHECK(strstr(msg, "built without CUDA") != NULL);
#endif
}

int main(void)
{
    t_run("device cpu and bad names", test_cpu);
    t_run("device auto falls back to cpu without a GPU", test_auto);
    return t_done();
}
