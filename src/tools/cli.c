#include "tools/cli.h"

#include <stdio.h>
#include <stdlib.h>

bool cli_parse_num(const char *s, double lo, double hi, double *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

bool cli_emit_stdout(void *user, const char *text, size_t len)
{
    (void)user;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return true;
}
