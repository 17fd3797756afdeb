/* load_json.c - Hugging Face tokenizer.json (+ tokenizer_config.json) loader.
 *
 * Supported: model BPE (merges as "a b" strings or [a, b] pairs, ignore_merges, byte_fallback,
 * fuse_unk, unk_token), normalizers, pre-tokenizers, post-processors and decoders listed in
 * docs/tokenizer.md. Anything else is refused with an error naming the component, rather than
 * silently producing different ids.
 * The model is byte-level when a ByteLevel pre-tokenizer or decoder is present; its vocabulary
 * is then keyed by raw bytes (tok_internal.h invariant 2) and merge parts are converted the same way.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tok_internal.h"

#define J(o, k) cJSON_GetObjectItemCaseSensitive((o), (k))

static const char *jstr(const cJSON *o, const char *k)
{
    const cJSON *v = J(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool jbool(const cJSON *o, const char *k, bool dflt)
{
    const cJSON *v = J(o, k);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static bool has_type(const cJSON *o, const char *type, const char *seq_key)
{
    if (!cJSON_IsObject(o)) return false;
    const char *ty = jstr(o, "type");
    if (ty && !strcmp(ty, type)) return true;
    const cJSON *seq = J(o, seq_key);
    const cJSON *it;
    cJSON_ArrayForEach(it, seq) if (has_type(it, type, seq_key)) return true;
    return false;
}

static char *dup_n(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) { memcpy(d, s, n); d[n] = '\0'; }
    return d;
}

// --- normalizers

static ai_status parse_normalizer(tokenizer *t, const cJSON *o, ai_err *err)
{
    if (!o || cJSON_IsNull(o)) return AI_OK;
    const char *ty = jstr(o, "type");
    if (!ty) return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: normalizer without a type");
    if (!strcmp(ty, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, J(o, "normalizers")) {
            ai_status st = parse_normalizer(t, it, err);
            if (st) return st;
        }
        return AI_OK;
    }
    if (t->n_norm >= TOK_MAX_STEPS) return ai_err_set(err, AI_ERR_RANGE, "tokenizer.json: too many normalizers");
    norm_step *s = &t->norm[t->n_norm];
    memset(s, 0, sizeof *s);
    if (!strcmp(ty, "NFC")) s->kind = NORM_NFC;
    else if (!strcmp(ty, "NFKC")) s->kind = NORM_NFKC;
    else if (!strcmp(ty, "NFD")) s->kind = NORM_NFD;
    else if (!strcmp(ty, "NFKD")) s->kind = NORM_NFKD;
    else if (!strcmp(ty, "Lowercase")) s->kind = NORM_LOWER;
    else if (!strcmp(ty, "Strip")) {
        s->kind = NORM_STRIP;
        s->left = jbool(o, "strip_left", true);
        s->right = jbool(o, "strip_right", true);
    } else if (!strcmp(ty, "Prepend")) {
        const char *p = jstr(o, "prepend");
        if (!p) return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: normalizer Prepend without 'prepend'");
        s->kind = NORM_PREPEND;
        s->a_len = strlen(p);
        if (!(s->a = dup_n(p, s->a_len))) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
    } else if (!strcmp(ty, "Replace")) {
        const cJSON *pat = J(o, "pattern");
        const char *lit = jstr(pat, "String"), *re = jstr(pat, "Regex"), *content = jstr(o, "content");
        if ((!lit && !re) || !content)
            return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: normalizer Replace needs pattern and content");
        s->kind = NORM_REPLACE;
        s->b_len = strlen(content);
        if (!(s->b = dup_n(content, s->b_len))) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
        if (lit) {
            s->a_len = strlen(lit);
            if (!(s->a = dup_n(lit, s->a_len))) { free(s->b); return ai_err_set(err, AI_ERR_NOMEM, "out of memory"); }
        } else {
            ai_status st = tok_regex_compile(&s->re, re, strlen(re), err);
            if (st) { free(s->b); return ai_err_prefix(err, "tokenizer.json: normalizer Replace"); }
        }
    } else {
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "tokenizer.json: normalizer type '%s' unsupported", ty);
    }
    t->n_norm++;
    return AI_OK;
}

// --- pre-tokenizers

static bool parse_behavior(const char *b, enum split_behavior *out)
{
    if (!b) return false;
    static const struct { const char *name; enum split_behavior v; } tab[] = {
        {"Removed", SPLIT_REMOVED}, {"Isolated", SPLIT_ISOLATED}, {"MergedWithPrevious", SPLIT_MERGED_PREV},
        {"MergedWithNext", SPLIT_MERGED_NEXT}, {"Contiguous", SPLIT_CONTIGUOUS},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (!strcmp(b, tab[i].name)) { *out = tab[i].v; return true; }
    return false;
}

static ai_status parse_pre(tokenizer *t, const cJSON *o, ai_err *err)
{
    if (!o || cJSON_IsNull(o)) return AI_OK;
    const char *ty = jstr(o, "type");
    if (!ty) return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: pre_tokenizer without a type");
    if (!strcmp(ty, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, J(o, "pretokenizers")) {
            ai_status st = parse_pre(t, it, err);
            if (st) return st;
        }
        return AI_OK;
    }
    if (t->n_pre >= TOK_MAX_STEPS) return ai_err_set(err, AI_ERR_RANGE, "tokenizer.json: too many pre_tokenizers");
    pretok_step *s = &t->pre[t->n_pre];
    memset(s, 0, sizeof *s);
    s->behavior = SPLIT_ISOLATED;
    ai_status st = AI_OK;
    if (!strcmp(ty, "Split")) {
        const cJSON *pat = J(o, "pattern");
        const char *lit = jstr(pat, "String"), *re = jstr(pat, "Regex");
        if (!lit && !re) return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: pre_tokenizer Split without a pattern");
        if (!parse_behavior(jstr(o, "behavior"), &s->behavior))
            return ai_err_set(err, AI_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer Split behavior '%s' unsupported",
                              jstr(o, "behavior") ? jstr(o, "behavior") : "(missing)");
        s->kind = PRETOK_SPLIT;
        s->invert = jbool(o, "invert", false);
        if (lit) {
            s->literal_len = strlen(lit);
            if (!(s->literal = dup_n(lit, s->literal_len))) return ai_err_set(err, AI_ERR_NOMEM, "out of memory");
        } else if ((st = tok_regex_compile(&s->re, re, strlen(re), err))) {
            return ai_err_prefix(err, "tokenizer.json: pre_tokenizer Split");
        }
    } else if (!strcmp(ty, "ByteLevel")) {
        s->kind = PRETOK_BYTELEVEL;
        s->add_prefix_space = jbool(o, "add_prefix_space", true);
        if (jbool(o, "use_regex", true) && (st = tok_regex_compile(&s->re, TOK_RE_GPT2, strlen(TOK_RE_GPT2), err)))
            return st;
    } else if (!strcmp(ty, "Digits")) {
        s->kind = PRETOK_DIGITS;
        s->individual = jbool(o, "individual_digits", false);
    } else if (!strcmp(ty, "Punctuation")) {
        s->kind = PRETOK_PUNCT;
        const char *b = jstr(o, "behavior");
        if (b && !parse_behavior(b, &s->behavior))
            return ai_err_set(err, AI_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer Punctuation behavior '%s' unsupported", b);
    } else if (!strcmp(ty, "Whitespace")) {
        s->kind = PRETOK_WHITESPACE;
        if ((st = tok_regex_compile(&s->re, "\\w+|[^\\w\\s]+", 13, err))) return st;
    } else if (!strcmp(ty, "WhitespaceSplit")) {
        s->kind = PRETOK_WSPLIT;
        if ((st = tok_regex_compile(&s->re, "\\s+", 3, err))) return st;
    } else if (!strcmp(ty, "Metaspace")) {
        s->kind = PRETOK_METASPACE;
        const char *r = jstr(o, "replacement");
        if (!r) r = "\xE2\x96\x81";
        s->repl_len = strlen(r);
        if (s->repl_len == 0 || s->repl_len >= sizeof s->repl)
            return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: pre_tokenizer Metaspace replacement must be one character");
        memcpy(s->repl, r, s->repl_len);
        const char *ps = jstr(o, "prepend_scheme");
        if (ps) s->scheme = !strcmp(ps, "first") ? PREPEND_FIRST : !strcmp(ps, "never") ? PREPEND_NEVER : PREPEND_ALWAYS;
        else s->scheme = jbool(o, "add_prefix_space", true) ? PREPEND_ALWAYS : PREPEND_NEVER;
        s->split = jbool(o, "split", true);
    } else {
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer type '%s' unsupported", ty);
    }
    t->n_pre++;
    return AI_OK;
}

// --- decoders

static ai_status parse_decoder(tokenizer *t, const cJSON *o, ai_err *err)
{
    if (!o || cJSON_IsNull(o)) return AI_OK;
    const char *ty = jstr(o, "type");
    if (!ty) return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: decoder without a type");
    if (!strcmp(ty, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, J(o, "decoders")) {
            ai_status st = parse_decoder(t, it, err);
            if (st) return st;
        }
    } else if (!strcmp(ty, "ByteLevel")) {
        t->dec_bytelevel = true;
    } else if (!strcmp(ty, "ByteFallback")) {
        t->dec_byte_fallback = true;
    } else if (!strcmp(ty, "Fuse")) {
        /* concatenation is what we do anyway */
    } else if (!strcmp(ty, "Replace")) {
        const char *lit = jstr(J(o, "pattern"), "String"), *c = jstr(o, "content");
        if (!lit || !c || strcmp(lit, "\xE2\x96\x81") || strcmp(c, " "))
            return ai_err_set(err, AI_ERR_UNSUPPORTED, "tokenizer.json: decoder Replace other than U+2581 -> ' ' unsupported");
        t->dec_meta = true;
    } else if (!strcmp(ty, "Strip")) {
        const char *c = jstr(o, "content");
        const cJSON *start = J(o, "start"), *stop = J(o, "stop");
        if (!c || strcmp(c, " ") || !cJSON_IsNumber(start) || (cJSON_IsNumber(stop) && stop->valueint != 0))
            return ai_err_set(err, AI_ERR_UNSUPPORTED, "tokenizer.json: decoder Strip other than leading spaces unsupported");
        t->dec_strip_lead = start->valueint < 0 ? 0 : start->valueint > 8 ? 8 : start->valueint;
    } else if (!strcmp(ty, "Metaspace")) {
        t->dec_meta = true;
        const char *ps = jstr(o, "prepend_scheme");
        bool strip = ps ? strcmp(ps, "never") != 0 : jbool(o, "add_prefix_space", true);
        t->dec_strip_lead = strip ? 1 : 0;
    } else {
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "tokenizer.json: decoder type '%s' unsupported", ty);
    }
    return AI_OK;
}

// --- post-processors

static int32_t special_id(const tokenizer *t, const cJSON *specials, const char *name)
{
    const cJSON *sp = J(specials, name);
    const cJSON *ids = J(sp, "ids");
    const cJSON *first = cJSON_GetArrayItem(ids, 0);
    if (cJSON_IsNumber(first) && cJSON_GetArraySize(ids) == 1) return (int32_t)first->valuedouble;
    for (size_t i = 0; i < t->n_added; i++)
        if (!strcmp(t->added[i].content, name)) return t->added[i].id;
    return -1;
}

static ai_status affix_push(tokenizer *t, bool suffix, int32_t id, ai_err *err)
{
    if (id < 0 || id >= t->n_vocab) return ai_err_set(err, AI_ERR_RANGE, "tokenizer.json: post_processor token id %d out of range", (int)id);
    size_t *n = suffix ? &t->n_suffix : &t->n_prefix;
    if (*n >= TOK_MAX_AFFIX) return ai_err_set(err, AI_ERR_RANGE, "tokenizer.json: post_processor adds too many tokens");
    (suffix ? t->suffix : t->prefix)[(*n)++] = id;
    return AI_OK;
}

static ai_status parse_post(tokenizer *t, const cJSON *o, ai_err *err)
{
    if (!o || cJSON_IsNull(o)) return AI_OK;
    const char *ty = jstr(o, "type");
    if (!ty) return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: post_processor without a type");
    ai_status st = AI_OK;
    if (!strcmp(ty, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, J(o, "processors")) if ((st = parse_post(t, it, err))) return st;
    } else if (!strcmp(ty, "ByteLevel")) {
        /* offsets only */
    } else if (!strcmp(ty, "TemplateProcessing")) {
        bool after = false;
        const cJSON *it;
        cJSON_ArrayForEach(it, J(o, "single")) {
            const cJSON *sp = J(it, "SpecialToken");
            if (J(it, "Sequence")) { after = true; continue; }
            const char *name = jstr(sp, "id");
            if (!name) return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: post_processor template item without an id");
            int32_t id = special_id(t, J(o, "special_tokens"), name);
            if (id < 0) return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: post_processor names unknown special token '%s'", name);
            if ((st = affix_push(t, after, id, err))) return st;
        }
    } else if (!strcmp(ty, "RobertaProcessing") || !strcmp(ty, "BertProcessing")) {
        const cJSON *cls = cJSON_GetArrayItem(J(o, "cls"), 1), *sep = cJSON_GetArrayItem(J(o, "sep"), 1);
        if (!cJSON_IsNumber(cls) || !cJSON_IsNumber(sep))
            return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: post_processor %s needs cls and sep", ty);
        if ((st = affix_push(t, false, (int32_t)cls->valuedouble, err))) return st;
        if ((st = affix_push(t, true, (int32_t)sep->valuedouble, err))) return st;
    } else {
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "tokenizer.json: post_processor type '%s' unsupported", ty);
    }
    return AI_OK;
}

// --- model

/* key (invariant 2) of a vocabulary spelling, into tmp */
static const char *key_of(const tokenizer *t, const char *s, size_t n, buf *tmp, size_t *kn)
{
    if (t->model == TOK_MODEL_BYTES) {
        buf_clear(tmp);
        if (bytelevel_decode(tmp, s, n)) { *kn = tmp->len; return tmp->data ? tmp->data : ""; }
    }
    *kn = n;
    return s;
}

static ai_status parse_merges(tokenizer *t, const cJSON *merges, ai_err *err)
{
    if (!cJSON_IsArray(merges)) return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: model.merges missing or not an array");
    buf ka, kb, cat;
    buf_init(&ka); buf_init(&kb); buf_init(&cat);
    ai_status st = AI_OK;
    int32_t rank = 0;
    const cJSON *m;
    ai_status rs = tok_merge_reserve(t, (size_t)cJSON_GetArraySize(merges), err);
    if (rs) { buf_free(&ka); buf_free(&kb); buf_free(&cat); return rs; }
    cJSON_ArrayForEach(m, merges) {
        const char *a, *b;
        size_t an, bn;
        if (cJSON_IsString(m)) {
            const char *sp = strchr(m->valuestring, ' ');
            if (!sp) { st = ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: merge %d '%.60s' is not 'a b'", (int)rank, m->valuestring); break; }
            a = m->valuestring; an = (size_t)(sp - a);
            b = sp + 1; bn = strlen(b);
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            a = m->child->valuestring; an = strlen(a);
            b = m->child->next->valuestring; bn = strlen(b);
        } else {
            st = ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: merge %d is neither \"a b\" nor [a, b]", (int)rank);
            break;
        }
        size_t kan, kbn;
        const char *k1 = key_of(t, a, an, &ka, &kan), *k2 = key_of(t, b, bn, &kb, &kbn);
        int32_t l = tok_lookup(t, k1, kan), r = tok_lookup(t, k2, kbn);
        buf_clear(&cat);
        buf_append(&cat, k1, kan);
        buf_append(&cat, k2, kbn);
        int32_t id = tok_lookup(t, cat.data ? cat.data : "", cat.len);
        if (l < 0 || r < 0 || id < 0) {
            st = ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: merge %d ('%.40s' + '%.40s') names a token not in the vocabulary",
                            (int)rank, a, b);
            break;
        }
        if ((st = tok_merge_add(t, l, r, rank, id, err))) break;
        rank++;
    }
    buf_free(&ka); buf_free(&kb); buf_free(&cat);
    return st;
}

static const char *cfg_token(const cJSON *cfg, const char *k)
{
    const cJSON *v = J(cfg, k);
    if (cJSON_IsString(v)) return v->valuestring;
    return jstr(v, "content");
}

static int32_t find_named(const tokenizer *t, const char *name)
{
    if (!name) return -1;
    for (size_t i = 0; i < t->n_added; i++)
        if (!strcmp(t->added[i].content, name)) return t->added[i].id;
    return tok_find_text(t, name, strlen(name));
}

static void mark_eog(tokenizer *t)
{
    static const char *const names[] = {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|endoftext|>", "<|end|>",
                                        "</s>", "<|end_of_text|>", "<end_of_turn>", "<|return|>", NULL};
    for (int i = 0; names[i]; i++) {
        int32_t id = find_named(t, names[i]);
        if (id >= 0 && (t->tok[id].attr & TOK_ATTR_CONTROL)) t->tok[id].attr |= TOK_ATTR_EOG;
    }
    if (t->eos_id >= 0) t->tok[t->eos_id].attr |= TOK_ATTR_EOG;
}

ai_status tok_load_cjson(tokenizer **out, const void *root_, const void *cfg_, ai_err *err)
{
    const cJSON *root = root_, *cfg = cfg_;
    const cJSON *model = J(root, "model");
    if (!cJSON_IsObject(model)) return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: 'model' missing");
    const char *mt = jstr(model, "type");
    if (mt && strcmp(mt, "BPE"))
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "tokenizer.json: model type '%s' unsupported (only BPE)", mt);
    const cJSON *vocab = J(model, "vocab");
    if (!cJSON_IsObject(vocab)) return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: model.vocab missing or not an object");
    const char *csp = jstr(model, "continuing_subword_prefix"), *eows = jstr(model, "end_of_word_suffix");
    if ((csp && *csp) || (eows && *eows))
        return ai_err_set(err, AI_ERR_UNSUPPORTED, "tokenizer.json: model continuing_subword_prefix/end_of_word_suffix unsupported");

    const cJSON *added = J(root, "added_tokens"), *it;
    double max_id = -1;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= (1 << 24) || it->valuedouble != (int32_t)it->valuedouble)
            return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: vocab entry '%.60s' has an invalid id", it->string);
        if (it->valuedouble > max_id) max_id = it->valuedouble;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = J(it, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 24) || !jstr(it, "content"))
            return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: added_tokens entry without a valid id/content");
        if (id->valuedouble > max_id) max_id = id->valuedouble;
    }
    if (max_id < 0) return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: empty vocabulary");

    tokenizer *t;
    ai_status st = tok_alloc(&t, (int32_t)max_id + 1, err);
    if (st) return st;
    t->model = (has_type(J(root, "pre_tokenizer"), "ByteLevel", "pretokenizers") ||
                has_type(J(root, "decoder"), "ByteLevel", "decoders")) ? TOK_MODEL_BYTES : TOK_MODEL_CHARS;
    for (int32_t i = 0; i < t->n_vocab; i++) t->tok[i].attr = TOK_ATTR_UNUSED | TOK_ATTR_NOT_MODEL;
    cJSON_ArrayForEach(it, vocab) {
        if ((st = tok_set_token(t, (int32_t)it->valuedouble, it->string, strlen(it->string), 0, err))) goto fail;
    }
    cJSON_ArrayForEach(it, added) {
        int32_t id = (int32_t)J(it, "id")->valuedouble;
        const char *c = jstr(it, "content");
        bool special = jbool(it, "special", false);
        bool in_model = !(t->tok[id].attr & TOK_ATTR_NOT_MODEL);
        uint8_t attr = (uint8_t)((special ? TOK_ATTR_CONTROL : TOK_ATTR_USER) | (in_model ? 0 : TOK_ATTR_NOT_MODEL));
        if ((st = tok_set_token(t, id, c, strlen(c), attr, err))) goto fail;
        if ((st = tok_add_added(t, id, c, strlen(c), special, jbool(it, "lstrip", false), jbool(it, "rstrip", false),
                                jbool(it, "single_word", false), jbool(it, "normalized", !special), err)))
            goto fail;
    }
    t->ignore_merges = jbool(model, "ignore_merges", false);
    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->fuse_unk = jbool(model, "fuse_unk", false);
    if ((st = tok_finish(t, err))) goto fail;
    const char *unk = jstr(model, "unk_token");
    if (unk && (t->unk_id = find_named(t, unk)) < 0) {
        st = ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: unk_token '%.60s' is not in the vocabulary", unk);
        goto fail;
    }
    if ((st = parse_merges(t, J(model, "merges"), err))) goto fail;
    if ((st = bpe_mark_self(t, err))) goto fail;
    if ((st = parse_normalizer(t, J(root, "normalizer"), err))) goto fail;
    if ((st = parse_pre(t, J(root, "pre_tokenizer"), err))) goto fail;
    if ((st = parse_decoder(t, J(root, "decoder"), err))) goto fail;
    if (!J(root, "decoder") || cJSON_IsNull(J(root, "decoder"))) t->dec_bytelevel = t->model == TOK_MODEL_BYTES;
    if (t->dec_bytelevel && t->model != TOK_MODEL_BYTES) {
        st = ai_err_set(err, AI_ERR_UNSUPPORTED, "tokenizer.json: ByteLevel decoder on a non-byte-level model");
        goto fail;
    }
    if ((st = parse_post(t, J(root, "post_processor"), err))) goto fail;

    t->bos_id = find_named(t, cfg_token(cfg, "bos_token"));
    t->eos_id = find_named(t, cfg_token(cfg, "eos_token"));
    if (t->n_prefix == 0 && t->n_suffix == 0) {
        if (jbool(cfg, "add_bos_token", false) && t->bos_id >= 0) t->prefix[t->n_prefix++] = t->bos_id;
        if (jbool(cfg, "add_eos_token", false) && t->eos_id >= 0) t->suffix[t->n_suffix++] = t->eos_id;
    }
    if (t->bos_id < 0 && t->n_prefix) t->bos_id = t->prefix[0];
    mark_eog(t);
    *out = t;
    return AI_OK;
fail:
    tokenizer_free(t);
    return st;
}

ai_status tok_load_json(tokenizer **out, const char *json, size_t len, const char *cfg_json, size_t cfg_len, ai_err *err)
{
    *out = NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!root)
        return ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: invalid JSON near byte %zu", end ? (size_t)(end - json) : (size_t)0);
    cJSON *cfg = NULL;
    if (cfg_json) {
        cfg = cJSON_ParseWithLengthOpts(cfg_json, cfg_len, &end, false);
        if (!cfg) {
            cJSON_Delete(root);
            return ai_err_set(err, AI_ERR_FORMAT, "tokenizer_config.json: invalid JSON near byte %zu", end ? (size_t)(end - cfg_json) : (size_t)0);
        }
    }
    ai_status st = cJSON_IsObject(root) ? tok_load_cjson(out, root, cfg, err)
                                         : ai_err_set(err, AI_ERR_FORMAT, "tokenizer.json: top level is not an object");
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    return st;
}

ai_status tokenizer_from_json(tokenizer **out, const char *json, size_t len, const char *config_json, size_t config_len, ai_err *err)
{
    if (!out || !json) return ai_err_set(err, AI_ERR_INVALID, "tokenizer_from_json: NULL argument");
    return tok_load_json(out, json, len, config_json, config_len, err);
}
