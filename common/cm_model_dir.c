/* Opening and verifying an s1serve model directory (see cm_model_dir.h): manifest keys, family,
 * the SHA-256 and size of every listed file, then the weights (and kept adapter) against the
 * family's tensor inventory. Every refusal is one message naming the file and key or tensor.
 * It leaves out the family-specific numerics; those read manifest "config" themselves. */
#include "cm_model_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cm_family.h"
#include "cm_qwen35.h"
#include "cm_sha256.h"
#include "cm_verify_cache.h"

const char *cm_numerics_name(enum cm_numerics numerics) {
  return numerics == CM_NUMERICS_FP32 ? "fp32" : numerics == CM_NUMERICS_BF16 ? "bf16" : NULL;
}

int cm_numerics_parse(const char *name, enum cm_numerics *ret_numerics) {
  for (int i = 0; name && i < CM_NUMERICS_COUNT; i++)
    if (strcmp(name, cm_numerics_name((enum cm_numerics)i)) == 0) {
      *ret_numerics = (enum cm_numerics)i;
      return 0;
    }
  return -EINVAL;
}

static char *join(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  char *s = malloc(a + b + 2);
  if (s) {
    memcpy(s, dir, a);
    s[a] = '/';
    memcpy(s + a + 1, name, b + 1);
  }
  return s;
}

static bool plain_name(const char *f) {
  return f[0] != '\0' && f[0] != '.' && strchr(f, '/') == NULL;
}

/* Reads and parses a whole JSON file; the message gives json-c's reason and the byte offset. */
/* Parses a JSON file; when ret_sha256 is given, it gets the SHA-256 (hex) of the bytes parsed. */
static int parse_json_file(const char *path, json_object **ret, char *ret_sha256,
                           struct cm_diag *diag) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    int e = -errno;
    return cm_diag_set(diag, e, "%s: cannot open: %s", path, strerror(-e));
  }
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int rc = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? 2 * cap : 1 << 16;
      char *nb = cap <= (size_t)INT32_MAX ? realloc(buf, cap) : NULL;
      if (!nb) {
        rc = cap <= (size_t)INT32_MAX ? -ENOMEM
                                      : cm_diag_set(diag, -CM_ELIMIT, "%s: larger than 2 GiB", path);
        break;
      }
      buf = nb;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (n == 0)
      break;
  }
  fclose(f);
  if (!rc) {
    json_tokener *tok = json_tokener_new();
    if (!tok) {
      free(buf);
      return -ENOMEM;
    }
    json_object *o = json_tokener_parse_ex(tok, buf, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tok);
    size_t at = json_tokener_get_parse_end(tok);
    if (!o || je != json_tokener_success) {
      json_object_put(o);
      rc = cm_diag_set(diag, -CM_EFORMAT, "%s: not valid JSON (%s at byte %zu)", path,
                       je == json_tokener_continue ? "unexpected end of data"
                                                   : json_tokener_error_desc(je),
                       at);
    } else {
      *ret = o;
      if (ret_sha256) {
        uint8_t dg[CM_SHA256_BYTES];
        rc = cm_sha256_buf(buf, len, dg);
        if (!rc)
          cm_sha256_hex(dg, ret_sha256);
      }
    }
    json_tokener_free(tok);
  }
  free(buf);
  return rc;
}

void cm_model_dir_free(struct cm_model_dir *dir) {
  if (!dir)
    return;
  cm_safetensors_close(dir->weights);
  cm_safetensors_close(dir->adapter);
  cm_safetensors_close(dir->f32_rows_file);
  free(dir->f32_row_ids);
  json_object_put(dir->manifest);
  free(dir->tokenizer_path);
  free(dir->path);
  free(dir);
}

/* Gets manifest[key] of type t, or fails naming the key. */
static int need(json_object *obj, const char *key, json_type t, const char *mpath,
                const char *prefix, json_object **ret, struct cm_diag *diag) {
  json_object *v;
  *ret = NULL; /* set on every path (the compiler cannot see that cm_diag_set returns non-zero) */
  if (!json_object_object_get_ex(obj, key, &v))
    return cm_diag_set(diag, -CM_EMISSING, "%s: key '%s%s' missing", mpath, prefix, key);
  if (!json_object_is_type(v, t))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: key '%s%s' must be a %s", mpath, prefix, key,
                       json_type_to_name(t));
  *ret = v;
  return 0;
}

static bool same_file_state(const struct stat *a, const struct stat *b) {
  return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
         a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
         a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* Checks one listed file's size and SHA-256. With a verified-file cache (vc) and the directory's
 * absolute path (abs_dir), a file recorded there unchanged with the manifest's hash is not read;
 * a file hashed and matched is recorded when its state did not change while it was read. */
static int verify_file(struct cm_model_dir *md, const char *abs_dir, struct cm_verify_cache *vc,
                       const char *mpath, const char *name, json_object *entry,
                       struct cm_diag *diag) {
  const char *dir = md->path;
  json_object *jh, *jb;
  char prefix[300];
  snprintf(prefix, sizeof prefix, "files.%s.", name);
  if (!plain_name(name))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: key 'files.%s' is not a plain file name", mpath,
                       name);
  if (!json_object_is_type(entry, json_type_object))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: key 'files.%s' must be an object", mpath, name);
  int rc = need(entry, "sha256", json_type_string, mpath, prefix, &jh, diag);
  if (!rc)
    rc = need(entry, "bytes", json_type_int, mpath, prefix, &jb, diag);
  if (rc)
    return rc;
  char *p = join(dir, name), *abs = abs_dir && vc ? join(abs_dir, name) : NULL;
  int fd = -1;
  if (!p || (abs_dir && vc && !abs)) {
    rc = -ENOMEM;
    goto out;
  }
  struct stat sb, sb_read, sb_after;
  if (stat(p, &sb) != 0) {
    rc = cm_diag_set(diag, -CM_EMISSING, "%s: missing (listed in %s)", p, mpath);
    goto out;
  }
  int64_t want_bytes = json_object_get_int64(jb);
  if ((int64_t)sb.st_size != want_bytes) {
    rc = cm_diag_set(diag, -CM_EHASH, "%s: %lld bytes, %s lists %lld (truncated or replaced)", p,
                     (long long)sb.st_size, mpath, (long long)want_bytes);
    goto out;
  }
  if (abs && cm_verify_cache_hit(vc, abs, &sb, json_object_get_string(jh))) {
    md->n_files_cached++;
    goto out;
  }
  fd = open(p, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || fstat(fd, &sb_read) != 0) {
    int e = -errno;
    rc = cm_diag_set(diag, e, "%s: cannot open: %s", p, strerror(-e));
    goto out;
  }
  uint8_t dg[CM_SHA256_BYTES];
  char hex[CM_SHA256_HEX];
  rc = cm_sha256_fd(fd, p, dg, NULL, diag);
  if (rc)
    goto out;
  md->n_files_hashed++;
  cm_sha256_hex(dg, hex);
  if (strcmp(hex, json_object_get_string(jh)) != 0) {
    rc = cm_diag_set(diag, -CM_EHASH, "%s: SHA-256 %s does not match %s (%s)", p, hex, mpath,
                     json_object_get_string(jh));
    goto out;
  }
  if (abs && (int64_t)sb_read.st_size == want_bytes && fstat(fd, &sb_after) == 0 &&
      same_file_state(&sb_read, &sb_after))
    rc = cm_verify_cache_put(vc, abs, &sb_read, hex);
out:
  if (fd >= 0)
    close(fd);
  free(abs);
  free(p);
  return rc;
}

/* The kept adapter: every factor pair names a base tensor and has shapes [r, in] / [out, r]. */
static int check_adapter(struct cm_model_dir *md, const char *mpath, struct cm_diag *diag) {
  json_object *jr, *jf, *ja, *js;
  int rc = need(md->adapter_info, "rank", json_type_int, mpath, "adapter.", &jr, diag);
  if (!rc)
    rc = need(md->adapter_info, "file", json_type_string, mpath, "adapter.", &jf, diag);
  if (!rc && !json_object_object_get_ex(md->adapter_info, "alpha", &ja))
    rc = cm_diag_set(diag, -CM_EMISSING, "%s: key 'adapter.alpha' missing", mpath);
  if (!rc && !json_object_object_get_ex(md->adapter_info, "scale", &js))
    rc = cm_diag_set(diag, -CM_EMISSING, "%s: key 'adapter.scale' missing", mpath);
  if (rc)
    return rc;
  int64_t r = json_object_get_int64(jr);
  char *ap = join(md->path, json_object_get_string(jf));
  if (!ap)
    return -ENOMEM;
  rc = cm_safetensors_open(ap, &md->adapter, diag);
  size_t n = rc ? 0 : cm_safetensors_count(md->adapter);
  for (size_t i = 0; i < n && !rc; i++) {
    struct cm_tensor_view a, b, w;
    cm_safetensors_at(md->adapter, i, &a);
    size_t len = strlen(a.name);
    if (len < 7 || strcmp(a.name + len - 7, ".lora_B") == 0)
      continue; /* B is checked with its A */
    if (strcmp(a.name + len - 7, ".lora_A") != 0) {
      rc = cm_diag_set(diag, -CM_EFORMAT, "%s: tensor '%s' is neither .lora_A nor .lora_B", ap,
                       a.name);
      break;
    }
    char key[512];
    snprintf(key, sizeof key, "%.*s.lora_B", (int)(len - 7), a.name);
    if (cm_safetensors_find(md->adapter, key, &b) != 0) {
      rc = cm_diag_set(diag, -CM_EMISSING, "%s: tensor '%s' missing", ap, key);
      break;
    }
    snprintf(key, sizeof key, "%.*s.weight", (int)(len - 7), a.name);
    if (cm_safetensors_find(md->weights, key, &w) != 0 || w.n_dims != 2) {
      rc = cm_diag_set(diag, -CM_EMISSING, "%s: tensor '%s' adapts '%s', which the weights lack",
                       ap, a.name, key);
      break;
    }
    if (a.dtype != CM_DTYPE_F32 || b.dtype != CM_DTYPE_F32) {
      rc = cm_diag_set(diag, -CM_EDTYPE, "%s: tensor '%s': LoRA factors must be F32", ap, a.name);
      break;
    }
    if (a.n_dims != 2 || b.n_dims != 2 || a.shape[0] != r || a.shape[1] != w.shape[1] ||
        b.shape[0] != w.shape[0] || b.shape[1] != r) {
      rc = cm_diag_set(diag, -CM_ESHAPE,
                       "%s: tensor '%s': factors do not fit rank %lld and '%s' [%lld, %lld]", ap,
                       a.name, (long long)r, key, (long long)w.shape[0], (long long)w.shape[1]);
      break;
    }
  }
  /* every lora_B has its lora_A */
  for (size_t i = 0; i < n && !rc; i++) {
    struct cm_tensor_view b, a;
    cm_safetensors_at(md->adapter, i, &b);
    size_t len = strlen(b.name);
    if (len < 7 || strcmp(b.name + len - 7, ".lora_B") != 0)
      continue;
    char key[512];
    snprintf(key, sizeof key, "%.*s.lora_A", (int)(len - 7), b.name);
    if (cm_safetensors_find(md->adapter, key, &a) != 0)
      rc = cm_diag_set(diag, -CM_EMISSING, "%s: tensor '%s' missing", ap, key);
  }
  free(ap);
  return rc;
}

/* Manifest "embed_f32_rows" {"file", "tensor", "ids"}: the release's float32 embedding rows (see
 * cm_model_dir.h). The file must be listed (so it was hashed). */
static int check_f32_rows(struct cm_model_dir *md, json_object *blk, json_object *files,
                          const struct cm_qwen35_dims *dims, const char *mpath,
                          struct cm_diag *diag) {
  json_object *jf, *jt, *ji;
  int rc;
  if (!json_object_is_type(blk, json_type_object))
    return cm_diag_set(diag, -CM_EFORMAT, "%s: key 'embed_f32_rows' must be an object", mpath);
  if ((rc = need(blk, "file", json_type_string, mpath, "embed_f32_rows.", &jf, diag)) ||
      (rc = need(blk, "tensor", json_type_string, mpath, "embed_f32_rows.", &jt, diag)) ||
      (rc = need(blk, "ids", json_type_array, mpath, "embed_f32_rows.", &ji, diag)))
    return rc;
  const char *fname = json_object_get_string(jf), *tname = json_object_get_string(jt);
  if (!plain_name(fname) || !json_object_object_get_ex(files, fname, NULL))
    return cm_diag_set(diag, -CM_EMISSING, "%s: embed_f32_rows.file '%s' is not a listed file",
                       mpath, fname);
  size_t n = json_object_array_length(ji);
  if (n == 0 || (int64_t)n > dims->vocab)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: embed_f32_rows.ids must hold 1 to %lld ids", mpath,
                       (long long)dims->vocab);
  if (!(md->f32_row_ids = calloc(n, sizeof *md->f32_row_ids)))
    return -ENOMEM;
  for (size_t i = 0; i < n; i++) {
    json_object *e = json_object_array_get_idx(ji, i);
    int64_t id = json_object_is_type(e, json_type_int) ? json_object_get_int64(e) : -1;
    if (id < 0 || id >= dims->vocab)
      return cm_diag_set(diag, -CM_EFORMAT,
                         "%s: embed_f32_rows.ids[%zu] is not a row of the %lld-row embedding",
                         mpath, i, (long long)dims->vocab);
    for (size_t j = 0; j < i; j++)
      if (md->f32_row_ids[j] == id)
        return cm_diag_set(diag, -CM_EFORMAT, "%s: embed_f32_rows.ids[%zu] repeats %lld", mpath, i,
                           (long long)id);
    md->f32_row_ids[i] = (int32_t)id;
  }
  char *p = join(md->path, fname);
  if (!p)
    return -ENOMEM;
  rc = cm_safetensors_open(p, &md->f32_rows_file, diag);
  if (!rc && cm_safetensors_find(md->f32_rows_file, tname, &md->f32_rows) != 0)
    rc = cm_diag_set(diag, -CM_EMISSING, "%s: tensor '%s' missing", p, tname);
  else if (!rc && (md->f32_rows.dtype != CM_DTYPE_F32 || md->f32_rows.n_dims != 2 ||
                   md->f32_rows.shape[0] != (int64_t)n || md->f32_rows.shape[1] != dims->hidden))
    rc = cm_diag_set(diag, -CM_EFORMAT, "%s: tensor '%s' must be F32 [%zu, %lld] (embed_f32_rows)",
                     p, tname, n, (long long)dims->hidden);
  free(p);
  /* the BF16 table holds exactly their bf16 rounding: the bf16 numerics (and a loader that reads
   * only the table) see the same rows */
  struct cm_tensor_view e;
  if (!rc && cm_safetensors_find(md->weights, "model.language_model.embed_tokens.weight", &e) != 0)
    rc = cm_diag_set(diag, -CM_EMISSING, "%s: embed_f32_rows without the embedding table", mpath);
  for (size_t i = 0; !rc && i < n && e.dtype == CM_DTYPE_BF16; i++) {
    const unsigned char *t =
        (const unsigned char *)e.data + (size_t)md->f32_row_ids[i] * (size_t)dims->hidden * 2;
    const unsigned char *f =
        (const unsigned char *)md->f32_rows.data + i * (size_t)dims->hidden * 4;
    for (int64_t j = 0; j < dims->hidden; j++) {
      float x;
      memcpy(&x, f + j * 4, 4); /* little-endian hosts (as the whole loader) */
      uint16_t want = cm_f32_to_bf16(x), got = (uint16_t)(t[j * 2] | (t[j * 2 + 1] << 8));
      if (want != got) {
        rc = cm_diag_set(diag, -CM_EFORMAT,
                         "%s: embedding row %d of weights.safetensors is not the bf16 rounding "
                         "of embed_f32_rows row %zu (element %lld)",
                         mpath, md->f32_row_ids[i], i, (long long)j);
        break;
      }
    }
  }
  if (!rc)
    md->n_f32_rows = n;
  return rc;
}

int cm_model_dir_open(const char *path, struct cm_model_dir **ret_dir, struct cm_diag *diag) {
  return cm_model_dir_open_for(path, CM_MODEL_DIR_SERVE, ret_dir, diag);
}

int cm_model_dir_open_for(const char *path, enum cm_model_dir_use use,
                          struct cm_model_dir **ret_dir, struct cm_diag *diag) {
  if (use != CM_MODEL_DIR_SERVE && use != CM_MODEL_DIR_COMPILE)
    return cm_diag_set(diag, -EINVAL, "%s: unknown model directory use %d", path, (int)use);
  struct cm_model_dir *md = calloc(1, sizeof *md);
  char *mpath = NULL, *wpath = NULL, *abs_dir = NULL;
  struct cm_verify_cache *vc = NULL;
  struct cm_qwen35_dims dims = {0};
  int rc = 0;
  if (!md || !(md->path = strdup(path)) || !(mpath = join(path, CM_MODEL_MANIFEST))) {
    rc = -ENOMEM;
    goto fail;
  }
  struct stat sb;
  if (stat(mpath, &sb) != 0) {
    int e = -errno;
    rc = cm_diag_set(diag, e == -ENOENT ? -ENOENT : e, "%s: cannot open: %s", mpath, strerror(-e));
    goto fail;
  }
  rc = parse_json_file(mpath, &md->manifest, md->manifest_sha256, diag);
  if (rc)
    goto fail;
  if (!json_object_is_type(md->manifest, json_type_object)) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "%s: not valid JSON (not an object)", mpath);
    goto fail;
  }
  json_object *m = md->manifest, *jv, *tok, *tfile, *files, *jvis;
  rc = need(m, "format", json_type_string, mpath, "", &jv, diag);
  if (rc)
    goto fail;
  if (strcmp(json_object_get_string(jv), CM_MODEL_FORMAT) != 0) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "%s: key 'format' is \"%s\", expected \"%s\"", mpath,
                     json_object_get_string(jv), CM_MODEL_FORMAT);
    goto fail;
  }
  rc = need(m, "family", json_type_string, mpath, "", &jv, diag);
  if (rc)
    goto fail;
  md->family = json_object_get_string(jv);
  if (!cm_family_find(md->family)) {
    rc = cm_diag_set(diag, -CM_EUNSUPPORTED, "%s: key 'family': unknown family \"%s\"", mpath,
                     md->family);
    goto fail;
  }
  if ((rc = need(m, "config", json_type_object, mpath, "", &md->config, diag)) ||
      (rc = need(m, "tokenizer", json_type_object, mpath, "", &tok, diag)) ||
      (rc = need(tok, "file", json_type_string, mpath, "tokenizer.", &tfile, diag)) ||
      (rc = need(m, "vision", json_type_boolean, mpath, "", &jvis, diag)) ||
      (rc = need(m, "files", json_type_object, mpath, "", &files, diag)))
    goto fail;
  md->vision = json_object_get_boolean(jvis);
  md->numerics = CM_NUMERICS_FP32;
  if (json_object_object_get_ex(m, "numerics", &jv) &&
      (!json_object_is_type(jv, json_type_string) ||
       cm_numerics_parse(json_object_get_string(jv), &md->numerics) != 0)) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "%s: key 'numerics' must be \"fp32\" or \"bf16\"", mpath);
    goto fail;
  }
  if (json_object_object_get_ex(m, "adapter", &md->adapter_info) &&
      !json_object_is_type(md->adapter_info, json_type_object)) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "%s: key 'adapter' must be an object", mpath);
    goto fail;
  }
  if (md->adapter_info && !json_object_is_type(md->adapter_info, json_type_object))
    md->adapter_info = NULL;
  /* Required files must be listed (and so hashed). */
  const char *required[3] = {"weights.safetensors", json_object_get_string(tfile), NULL};
  json_object *af;
  if (md->adapter_info && json_object_object_get_ex(md->adapter_info, "file", &af))
    required[2] = json_object_get_string(af);
  for (int i = 0; i < 3; i++) {
    if (required[i] && !json_object_object_get_ex(files, required[i], NULL)) {
      rc = cm_diag_set(diag, -CM_EMISSING, "%s: key 'files.%s' missing", mpath, required[i]);
      goto fail;
    }
  }
  rc = cm_verify_cache_open(&vc);
  if (rc)
    goto fail;
  abs_dir = vc ? realpath(path, NULL) : NULL; /* NULL: no cache use (hash everything) */
  json_object_object_foreach(files, fname, fentry) {
    /* compiling reads the tokenizer alone: the other files are neither hashed nor required */
    if (use == CM_MODEL_DIR_COMPILE && strcmp(fname, json_object_get_string(tfile)) != 0)
      continue;
    rc = verify_file(md, abs_dir, vc, mpath, fname, fentry, diag);
    if (rc)
      goto fail;
  }
  (void)cm_verify_cache_save(vc); /* best effort: a failure only costs hashing next time */
  if (!(md->tokenizer_path = join(path, json_object_get_string(tfile))) ||
      !(wpath = join(path, "weights.safetensors"))) {
    rc = -ENOMEM;
    goto fail;
  }
  rc = cm_qwen35_dims_read(md->config, mpath, &dims, diag);
  if (rc)
    goto fail;
  if (md->vision && !dims.has_vision_config) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "%s: key 'vision' is true but config has no vision_config",
                     mpath);
    goto fail;
  }
  if (use == CM_MODEL_DIR_COMPILE)
    goto done;
  rc = cm_safetensors_open(wpath, &md->weights, diag);
  if (rc)
    goto fail;
  rc = cm_qwen35_check(&dims, md->vision, md->weights, wpath, diag);
  if (!rc && md->adapter_info)
    rc = check_adapter(md, mpath, diag);
  json_object *f32r = NULL;
  if (!rc && json_object_object_get_ex(m, "embed_f32_rows", &f32r))
    rc = check_f32_rows(md, f32r, files, &dims, mpath, diag);
  if (rc)
    goto fail;
done:
  cm_qwen35_dims_fini(&dims);
  cm_verify_cache_free(vc);
  free(abs_dir);
  free(mpath);
  free(wpath);
  *ret_dir = md;
  return 0;
fail:
  cm_qwen35_dims_fini(&dims);
  cm_verify_cache_free(vc);
  free(abs_dir);
  free(mpath);
  free(wpath);
  cm_model_dir_free(md);
  return rc;
}

int cm_model_dir_add_file(json_object *files, const char *dir, const char *name,
                          struct cm_diag *diag) {
  char *p = join(dir, name);
  if (!p)
    return -ENOMEM;
  uint8_t dg[CM_SHA256_BYTES];
  char hex[CM_SHA256_HEX];
  uint64_t n = 0;
  int rc = cm_sha256_file(p, dg, &n, diag);
  free(p);
  if (rc)
    return rc;
  cm_sha256_hex(dg, hex);
  json_object *e = json_object_new_object();
  if (!e)
    return -ENOMEM;
  json_object_object_add(e, "sha256", json_object_new_string(hex));
  json_object_object_add(e, "bytes", json_object_new_int64((int64_t)n));
  json_object_object_add(files, name, e);
  return 0;
}

int cm_model_dir_max_body(const struct cm_model_dir *dir, uint64_t *ret_bytes,
                          struct cm_diag *diag) {
  json_object *lim = NULL, *v = NULL;
  if (!json_object_object_get_ex(dir->manifest, "limits", &lim) ||
      !json_object_object_get_ex(lim, "max_body_bytes", &v)) {
    const struct cm_family *f = cm_family_find(dir->family);
    *ret_bytes = f && f->max_body_bytes ? f->max_body_bytes : CM_LIMIT_MAX_BODY_OPEN_JEV;
    return 0;
  }
  int64_t n = json_object_get_int64(v);
  if (!json_object_is_type(v, json_type_int) || n < 1 || n > (int64_t)CM_LIMIT_MAX_BODY_HARD)
    return cm_diag_set(diag, -CM_EFORMAT, "%s: limits.max_body_bytes must be an integer in 1 .. "
                       "%u", dir->path, CM_LIMIT_MAX_BODY_HARD);
  *ret_bytes = (uint64_t)n;
  return 0;
}

json_object *cm_model_dir_manifest_new(const char *family, json_object *config, bool vision,
                                       const char *tokenizer_file, json_object *image_processor) {
  json_object *m = json_object_new_object();
  if (!m)
    return NULL;
  json_object_object_add(m, "format", json_object_new_string(CM_MODEL_FORMAT));
  json_object_object_add(m, "family", json_object_new_string(family));
  json_object_object_add(m, "numerics", json_object_new_string(cm_numerics_name(CM_NUMERICS_FP32)));
  json_object_object_add(m, "config", json_object_get(config));
  json_object_object_add(m, "vision", json_object_new_boolean(vision));
  json_object *tok = json_object_new_object();
  json_object_object_add(tok, "file", json_object_new_string(tokenizer_file));
  json_object_object_add(m, "tokenizer", tok);
  json_object *chat = json_object_new_object();
  json_object_object_add(chat, "prefix", json_object_new_string(""));
  json_object_object_add(chat, "suffix", json_object_new_string(""));
  json_object_object_add(m, "chat", chat);
  json_object_object_add(m, "image_processor", json_object_get(image_processor));
  json_object_object_add(m, "calibration", json_object_new_object());
  json_object *lim = json_object_new_object();
  json_object_object_add(lim, "max_prompt_tokens", json_object_new_int(CM_LIMIT_MAX_PROMPT_TOKENS));
  json_object_object_add(lim, "max_images", json_object_new_int(CM_LIMIT_MAX_IMAGES));
  json_object_object_add(lim, "max_image_pixels", json_object_new_int(CM_LIMIT_MAX_IMAGE_PIXELS));
  json_object_object_add(lim, "max_rows", json_object_new_int(CM_LIMIT_MAX_ROWS));
  json_object_object_add(m, "limits", lim);
  return m;
}

int cm_model_dir_write_manifest(const char *dir, json_object *manifest, struct cm_diag *diag) {
  char *p = join(dir, CM_MODEL_MANIFEST);
  if (!p)
    return -ENOMEM;
  int rc = 0;
  if (json_object_to_file_ext(p, manifest, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                               JSON_C_TO_STRING_NOSLASHESCAPE) != 0)
    rc = cm_diag_set(diag, -EIO, "%s: write failed (%s)", p, json_util_get_last_err());
  free(p);
  return rc;
}
