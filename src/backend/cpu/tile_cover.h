/* tile_cover.h - the ISA-independent part of the register-tile kernels: pick the tile shape
 * (4 or 1 rows x CPU_TILE_T or 1 tokens) and cover any nr x nt block with tiles.
 *
 * Included (not compiled on its own) by tiles_<isa>.c after that file defines TARGET, INLINE and its
 * qtile()/ftile() kernels, so each ISA gets its own copy compiled for its instruction set and the
 * shape dispatch inlines into the kernels (a shared .c file could not be compiled for both ISAs).
 */
TARGET INLINE void any_tile(const dtype wt, int64_t n, const uint8_t *w, size_t w_row, int R, int T,
                            const uint8_t *x, size_t x_row, float *y, size_t y_row)
{
    const bool q = wt == DTYPE_Q8_0 || wt == DTYPE_Q4_0 || wt == DTYPE_Q4_1;
    const int64_t len = q ? n / 32 : n;
#define SHAPE(r, t) do { if (q) qtile(wt, r, t, len, w, w_row, x, x_row, y, y_row); \
                         else ftile(wt, r, t, len, w, w_row, x, x_row, y, y_row); } while (0)
    if (R == 4 && T == CPU_TILE_T) SHAPE(4, CPU_TILE_T);
    else if (R == 4 && T == 1) SHAPE(4, 1);
    else if (R == 1 && T == CPU_TILE_T) SHAPE(1, CPU_TILE_T);
    else SHAPE(1, 1);
#undef SHAPE
}

/* Any nr x nt: groups of 4 rows (then single rows), and for each group every token of the call,
 * CPU_TILE_T at a time, so the group's weight blocks stay in L1 while the tokens pass by. */
TARGET INLINE void tile_cover(const dtype wt, int64_t n, const void *w, size_t w_row, int nr, const void *x,
                              size_t x_row, int nt, float *y, size_t y_row)
{
    for (int r = 0; r < nr;) {
        const int R = nr - r >= 4 ? 4 : 1;
        for (int t = 0; t < nt;) {
            const int T = nt - t >= CPU_TILE_T ? CPU_TILE_T : 1;
            any_tile(wt, n, (const uint8_t *)w + (size_t)r * w_row, w_row, R, T, (const uint8_t *)x + (size_t)t * x_row,
                     x_row, y + (size_t)t * y_row + (size_t)r, y_row);
            t += T;
        }
        r += R;
    }
}
