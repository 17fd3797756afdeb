/* cmd_kernels.c - `aiinfra kernels`: the CUDA kernel ladders (src/kernels/) measured, and their roofline.
 *
 *   aiinfra kernels bench [OP|all] [--json] [--reps N] [--seed S] [--small]       (OP: LADDER_OPS)
 *   aiinfra kernels roofline [--out FILE.svg|FILE.png] [--op OP|all] [--gemm-gflops R]
 *
 * bench prints one table row per version and shape: median time, GB/s, the fraction of the copy
 * bandwidth measured in the same run, TFLOP/s, the speed against the library measured on the same
 * shape where the ladder has one (cuBLASLt, ...), the error against the CPU reference and its bound;
 * --json prints one object with the ceilings and a "versions" array instead (with FLOPs, bytes and
 * arithmetic intensity, the input of scripts/roofline_plot.py). roofline runs the ladders, writes that
 * JSON to a temporary file and calls scripts/roofline_plot.py on it (found through $AIINFRA_ROOT, else
 * next to the binary: build/../scripts or build/asan/../../scripts, else ./scripts; the interpreter is
 * $AIINFRA_PYTHON or python3). Without a CUDA device both print one line and exit 0. Exit 1 when a
 * version fails its error bound or on a CUDA error, 2 on bad usage.
 */
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "kernels/ladder.h"
#include "tools/cli.h"
#include "tools/commands.h"

extern char **environ;

static int usage(void)
{
    static const char *const ops[] = { LADDER_OPS };
    char list[256] = "";
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s|", ops[i]);
    fprintf(stderr,
            "usage: aiinfra kernels bench [%sall] [--json] [--reps N] [--seed S] [--small]\n"
            "       aiinfra kernels roofline [--out FILE.svg|FILE.png] [--op %sall] [--gemm-gflops R]\n",
            list, list);
    return 2;
}

static void print_table(const ladder_report *rep)
{
    printf("device: %s   copy ceiling: %.0f GB/s (2 GiB device-to-device, read + write)", rep->device, rep->copy_gbps);
    if (rep->gemm_gflops > 0) printf("   GEMM ceiling: %.0f TFLOP/s (cuBLASLt bf16)", rep->gemm_gflops / 1e3);
    printf("\n%-9s %-22s %-18s %-5s %10s %9s %7s %9s %14s %10s %8s %s\n", "op", "version", "shape", "dtype", "time_us",
           "GB/s", "%copy", "TFLOP/s", "vs library", "rel_err", "bound", "ok");
    for (int i = 0; i < rep->n_rows; i++) {
        const ladder_result *r = &rep->rows[i];
        char vs[32] = "-";
        if (r->ref_ms > 0) snprintf(vs, sizeof vs, "%.2fx %s", r->frac_ref, r->ref_name);
        printf("%-9s %-22s %-18s %-5s %10.1f %9.1f %6.1f%% %9.2f %14s %10.2e %8.0e %s\n", r->op, r->version, r->shape,
               r->dtype, r->ms * 1e3, r->gbps, 100.0 * r->frac_copy, r->gflops / 1e3, vs, r->err, r->tol,
               r->ok ? "ok" : "FAIL");
    }
}

static char *report_json(const ladder_report *rep, double gemm_gflops)
{
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "device", rep->device);
    cJSON_AddNumberToObject(root, "copy_gbps", rep->copy_gbps);
    if (gemm_gflops <= 0) gemm_gflops = rep->gemm_gflops; /* --gemm-gflops overrides the measured one */
    if (gemm_gflops > 0) cJSON_AddNumberToObject(root, "gemm_gflops", gemm_gflops);
    else cJSON_AddNullToObject(root, "gemm_gflops");
    cJSON *arr = cJSON_AddArrayToObject(root, "versions");
    for (int i = 0; i < rep->n_rows; i++) {
        const ladder_result *r = &rep->rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "op", r->op);
        cJSON_AddStringToObject(o, "version", r->version);
        cJSON_AddStringToObject(o, "desc", r->desc);
        cJSON_AddStringToObject(o, "shape", r->shape);
        cJSON_AddStringToObject(o, "dtype", r->dtype);
        cJSON_AddNumberToObject(o, "ms", r->ms);
        cJSON_AddNumberToObject(o, "bytes", r->bytes);
        cJSON_AddNumberToObject(o, "flops", r->flops);
        cJSON_AddNumberToObject(o, "gbps", r->gbps);
        cJSON_AddNumberToObject(o, "gflops", r->gflops);
        cJSON_AddNumberToObject(o, "intensity", r->intensity);
        cJSON_AddNumberToObject(o, "frac_copy", r->frac_copy);
        if (r->ref_ms > 0) {
            cJSON_AddStringToObject(o, "ref", r->ref_name);
            cJSON_AddNumberToObject(o, "ref_ms", r->ref_ms);
            cJSON_AddNumberToObject(o, "frac_ref", r->frac_ref);
        }
        if (r->err == r->err) cJSON_AddNumberToObject(o, "rel_err", r->err);
        else cJSON_AddNullToObject(o, "rel_err"); /* NaN is not JSON */
        cJSON_AddNumberToObject(o, "bound", r->tol);
        cJSON_AddBoolToObject(o, "ok", r->ok);
        cJSON_AddItemToArray(arr, o);
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

static bool all_ok(const ladder_report *rep)
{
    for (int i = 0; i < rep->n_rows; i++)
        if (!rep->rows[i].ok) return false;
    return true;
}

/* Runs the ladders; 0 on success (rep filled), else the exit code (no device: the line printed). */
static int run_ladders(const char *op, const ladder_opts *o, ladder_report *rep, bool *no_device)
{
    char why[200];
    *no_device = false;
    if (!ladder_device_available(why, sizeof why)) {
        printf("kernels: skipped: %s\n", why);
        *no_device = true;
        return 0;
    }
    ai_err err = { 0 };
    if (ladder_run(op, o, rep, &err) != AI_OK) {
        fprintf(stderr, "kernels: %s\n", err.msg);
        ladder_report_free(rep);
        return 1;
    }
    return 0;
}

static int cmd_bench_ladders(int argc, char **argv)
{
    const char *op = "all";
    bool json = false;
    ladder_opts o = { 0 };
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        if (!strcmp(a, "--json")) json = true;
        else if (!strcmp(a, "--small")) o.small = true;
        else if (!strcmp(a, "--reps") && v && cli_parse_num(v, 3, 10000, &d)) o.reps = (int)d, i++;
        else if (!strcmp(a, "--seed") && v && cli_parse_num(v, 1, 1e15, &d)) o.seed = (uint64_t)d, i++;
        else if (a[0] != '-' && ladder_op_known(a)) op = a;
        else return usage();
    }
    ladder_report rep = { 0 };
    bool none;
    int rc = run_ladders(op, &o, &rep, &none);
    if (rc || none) return rc;
    if (json) {
        char *s = report_json(&rep, 0);
        if (!s) {
            fprintf(stderr, "kernels: out of memory\n");
            ladder_report_free(&rep);
            return 1;
        }
        printf("%s\n", s);
        free(s);
    } else {
        print_table(&rep);
    }
    rc = all_ok(&rep) ? 0 : 1;
    if (rc) fprintf(stderr, "kernels: a version exceeded its error bound (see the table)\n");
    ladder_report_free(&rep);
    return rc;
}

/* scripts/roofline_plot.py, first that exists: $AIINFRA_ROOT/scripts, next to the binary, ./scripts. */
static bool find_script(char *out, size_t len)
{
    const char *name = "scripts/roofline_plot.py";
    const char *root = getenv("AIINFRA_ROOT");
    if (root && *root) {
        snprintf(out, len, "%s/%s", root, name);
        if (access(out, R_OK) == 0) return true;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) *slash = 0;
        static const char *up[] = { "..", "../.." };
        for (int i = 0; i < 2; i++) {
            snprintf(out, len, "%s/%s/%s", exe, up[i], name);
            if (access(out, R_OK) == 0) return true;
        }
    }
    snprintf(out, len, "%s", name);
    return access(out, R_OK) == 0;
}

static int cmd_roofline(int argc, char **argv)
{
    const char *out = "roofline.svg", *op = "all";
    double gemm = 0;
    ladder_opts o = { 0 };
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        if (!strcmp(a, "--out") && v) out = argv[++i];
        else if (!strcmp(a, "--op") && v && ladder_op_known(v)) op = argv[++i];
        else if (!strcmp(a, "--small")) o.small = true;
        else if (!strcmp(a, "--gemm-gflops") && v && cli_parse_num(v, 0, 1e9, &d)) gemm = d, i++;
        else return usage();
    }
    char script[PATH_MAX + 64];
    if (!find_script(script, sizeof script)) {
        fprintf(stderr, "kernels roofline: scripts/roofline_plot.py not found (set AIINFRA_ROOT to the checkout)\n");
        return 1;
    }
    ladder_report rep = { 0 };
    bool none;
    int rc = run_ladders(op, &o, &rep, &none);
    if (rc || none) return rc;
    char *js = report_json(&rep, gemm);
    const bool ok = all_ok(&rep);
    ladder_report_free(&rep);
    if (!js) {
        fprintf(stderr, "kernels roofline: out of memory\n");
        return 1;
    }
    char tmp[] = "/tmp/aiinfra-roofline-XXXXXX";
    int fd = mkstemp(tmp);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fprintf(stderr, "kernels roofline: temporary file: %s\n", strerror(errno));
        if (fd >= 0) close(fd), unlink(tmp);
        free(js);
        return 1;
    }
    const bool wrote = fputs(js, f) >= 0;
    free(js);
    if (fclose(f) != 0 || !wrote) {
        fprintf(stderr, "kernels roofline: writing %s failed\n", tmp);
        unlink(tmp);
        return 1;
    }
    const char *py = getenv("AIINFRA_PYTHON");
    if (!py || !*py) py = "python3";
    char *args[] = { (char *)py, script, tmp, "--out", (char *)out, NULL };
    pid_t pid;
    int status = 0;
    int e = posix_spawnp(&pid, py, NULL, NULL, args, environ);
    if (e == 0) {
        while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    }
    unlink(tmp);
    if (e != 0) {
        fprintf(stderr, "kernels roofline: cannot run %s: %s\n", py, strerror(e));
        return 1;
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "kernels roofline: %s failed (matplotlib installed?)\n", script);
        return 1;
    }
    printf("wrote %s\n", out);
    if (!ok) fprintf(stderr, "kernels roofline: a version exceeded its error bound (aiinfra kernels bench)\n");
    return ok ? 0 : 1;
}

int cmd_kernels(int argc, char **argv)
{
    if (argc < 2) return usage();
    if (!strcmp(argv[1], "bench")) return cmd_bench_ladders(argc, argv);
    if (!strcmp(argv[1], "roofline")) return cmd_roofline(argc, argv);
    return usage();
}
