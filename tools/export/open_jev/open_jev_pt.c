/* The torch.save reader of open_jev_pt.h: a bounds-checked zip directory walk (stored entries only),
 * then a small stack machine over the pickle opcodes torch emits for a state dict. Every value
 * comes from one pool freed at the end; REDUCE is only understood for OrderedDict(),
 * _rebuild_tensor_v2 and _rebuild_parameter, and nothing else is ever "called". */
#include "open_jev_pt.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- zip ------------------------------------------------------------------------------------- */

struct zentry {
  const char *name;    /* entry name (not NUL-terminated), inside the file bytes */
  size_t name_len;     /* bytes of name */
  const uint8_t *data; /* stored bytes */
  size_t size;         /* bytes of data */
};

static uint32_t rd16(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8;
}

static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int zip_entries(const uint8_t *b, size_t n, struct zentry **ret, size_t *ret_n,
                       struct cm_diag *diag) {
  if (n < 22)
    return cm_diag_set(diag, -CM_EFORMAT, "not a zip archive (%zu bytes)", n);
  size_t eocd = SIZE_MAX;
  for (size_t i = n - 22 + 1; i-- > 0 && n - i <= 22 + 65535;) {
    if (rd32(b + i) == 0x06054b50u) {
      eocd = i;
      break;
    }
  }
  if (eocd == SIZE_MAX)
    return cm_diag_set(diag, -CM_EFORMAT, "not a zip archive: no end-of-directory record");
  uint32_t count = rd16(b + eocd + 10), cd_size = rd32(b + eocd + 12), cd_off = rd32(b + eocd + 16);
  if (count == 0xffffu || cd_size == 0xffffffffu || cd_off == 0xffffffffu)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "zip64 archives are not supported");
  if ((size_t)cd_off > eocd || (size_t)cd_size > eocd - cd_off)
    return cm_diag_set(diag, -CM_EFORMAT, "zip central directory outside the file");
  if (count > EX_PT_MAX_TENSORS + 16)
    return cm_diag_set(diag, -CM_ELIMIT, "zip archive has %u entries (limit %d)", count,
                       EX_PT_MAX_TENSORS + 16);
  struct zentry *e = calloc(count ? count : 1, sizeof *e);
  if (!e)
    return -ENOMEM;
  size_t p = cd_off, end = (size_t)cd_off + cd_size;
  int rc = 0;
  for (uint32_t k = 0; k < count && !rc; k++) {
    if (end - p < 46 || rd32(b + p) != 0x02014b50u) {
      rc = cm_diag_set(diag, -CM_EFORMAT, "zip central directory entry %u malformed", k);
      break;
    }
    uint32_t method = rd16(b + p + 10), csize = rd32(b + p + 20), usize = rd32(b + p + 24);
    size_t nl = rd16(b + p + 28), xl = rd16(b + p + 30), cl = rd16(b + p + 32);
    uint32_t loff = rd32(b + p + 42);
    if (end - p - 46 < nl + xl + cl) {
      rc = cm_diag_set(diag, -CM_EFORMAT, "zip central directory entry %u malformed", k);
      break;
    }
    e[k].name = (const char *)b + p + 46;
    e[k].name_len = nl;
    if (method != 0 || csize != usize) {
      rc = cm_diag_set(diag, -CM_EUNSUPPORTED, "zip entry '%.*s' is compressed (method %u)",
                       (int)nl, e[k].name, method);
      break;
    }
    if (csize == 0xffffffffu || loff == 0xffffffffu) {
      rc = cm_diag_set(diag, -CM_EUNSUPPORTED, "zip64 entries are not supported");
      break;
    }
    if ((size_t)loff > n || n - loff < 30 || rd32(b + loff) != 0x04034b50u) {
      rc = cm_diag_set(diag, -CM_EFORMAT, "zip entry '%.*s': bad local header", (int)nl, e[k].name);
      break;
    }
    size_t data = (size_t)loff + 30 + rd16(b + loff + 26) + rd16(b + loff + 28);
    if (data > n || n - data < csize) {
      rc = cm_diag_set(diag, -CM_EFORMAT, "zip entry '%.*s' outside the file", (int)nl, e[k].name);
      break;
    }
    e[k].data = b + data;
    e[k].size = csize;
    p += 46 + nl + xl + cl;
  }
  if (rc) {
    free(e);
    return rc;
  }
  *ret = e;
  *ret_n = count;
  return 0;
}

/* ---- pickle values --------------------------------------------------------------------------- */

enum vkind { V_NONE, V_BOOL, V_INT, V_FLOAT, V_STR, V_TUPLE, V_LIST, V_DICT, V_GLOBAL, V_PERSID,
             V_TENSOR, V_EMPTY_OBJ };

struct value {
  enum vkind kind;       /* what it is */
  int64_t i;             /* V_BOOL, V_INT */
  double f;              /* V_FLOAT */
  char *s;               /* V_STR text; V_GLOBAL "module.name"; heap, NUL-terminated */
  size_t len;            /* bytes of s */
  struct value **items;  /* V_TUPLE/V_LIST elements; V_DICT key, value pairs; heap */
  size_t n, cap;         /* items used / allocated */
  struct value *pid;     /* V_PERSID: the persistent id tuple */
  struct ex_pt_tensor *t; /* V_TENSOR: description (data filled at the end), heap */
  const struct value *storage; /* V_TENSOR: its persistent id */
  int64_t offset;        /* V_TENSOR: storage offset, elements */
};

struct vm {
  const uint8_t *p, *end;     /* pickle bytes and cursor */
  const uint8_t *start;       /* for offsets in messages */
  struct value **pool;        /* every value made, freed at the end */
  size_t n_pool, cap_pool;
  struct value **stack;       /* operand stack */
  size_t n_stack, cap_stack;
  size_t *marks;              /* stack heights of MARKs */
  size_t n_marks, cap_marks;
  struct value **memo;        /* memo table by index */
  size_t n_memo;
  struct cm_diag *diag;
};

static int grow(void **a, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap)
    return 0;
  size_t nc = *cap ? *cap : 16;
  while (nc < need)
    nc *= 2;
  void *na = realloc(*a, nc * elem);
  if (!na)
    return -ENOMEM;
  *a = na;
  *cap = nc;
  return 0;
}

static struct value *mk(struct vm *m, enum vkind k) {
  if (m->n_pool >= EX_PT_MAX_VALUES) {
    cm_diag_set(m->diag, -CM_ELIMIT, "data.pkl builds more than %d values", EX_PT_MAX_VALUES);
    return NULL;
  }
  if (grow((void **)&m->pool, &m->cap_pool, m->n_pool + 1, sizeof *m->pool))
    return NULL;
  struct value *v = calloc(1, sizeof *v);
  if (!v)
    return NULL;
  v->kind = k;
  m->pool[m->n_pool++] = v;
  return v;
}

static void value_free(struct value *v) {
  free(v->s);
  free(v->items);
  if (v->t) {
    free(v->t->name);
    free(v->t->data);
    free(v->t);
  }
  free(v);
}

static int add_item(struct value *c, struct value *x) {
  if (grow((void **)&c->items, &c->cap, c->n + 1, sizeof *c->items))
    return -ENOMEM;
  c->items[c->n++] = x;
  return 0;
}

static int bad(struct vm *m, const char *what) {
  return cm_diag_set(m->diag, -CM_EFORMAT, "data.pkl: %s at byte %zu", what,
                     (size_t)(m->p - m->start));
}

static int push(struct vm *m, struct value *v) {
  if (!v)
    return m->diag && m->diag->code ? m->diag->code : -ENOMEM;
  if (grow((void **)&m->stack, &m->cap_stack, m->n_stack + 1, sizeof *m->stack))
    return -ENOMEM;
  m->stack[m->n_stack++] = v;
  return 0;
}

static struct value *pop(struct vm *m) {
  size_t floor = m->n_marks ? m->marks[m->n_marks - 1] : 0;
  return m->n_stack > floor ? m->stack[--m->n_stack] : NULL;
}

static int need(struct vm *m, size_t k) {
  return (size_t)(m->end - m->p) >= k ? 0 : bad(m, "truncated opcode");
}

static struct value *mkstr(struct vm *m, const uint8_t *s, size_t n, enum vkind k) {
  struct value *v = mk(m, k);
  if (!v)
    return NULL;
  v->s = malloc(n + 1);
  if (!v->s)
    return NULL;
  memcpy(v->s, s, n);
  v->s[n] = '\0';
  v->len = n;
  return v;
}

static bool is_global(const struct value *v, const char *name) {
  return v && v->kind == V_GLOBAL && strcmp(v->s, name) == 0;
}

static bool is_int(const struct value *v) {
  return v && v->kind == V_INT;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) */
static struct value *rebuild_tensor(struct vm *m, const struct value *args) {
  if (args->kind != V_TUPLE || args->n < 4 || args->items[0]->kind != V_PERSID ||
      !is_int(args->items[1]) || args->items[2]->kind != V_TUPLE ||
      args->items[3]->kind != V_TUPLE || args->items[2]->n != args->items[3]->n ||
      args->items[2]->n > CM_TENSOR_MAX_DIMS) {
    bad(m, "unexpected _rebuild_tensor_v2 arguments");
    return NULL;
  }
  const struct value *size = args->items[2], *stride = args->items[3];
  struct value *v = mk(m, V_TENSOR);
  if (!v || !(v->t = calloc(1, sizeof *v->t)))
    return NULL;
  v->storage = args->items[0]->pid;
  v->offset = args->items[1]->i;
  v->t->n_dims = (int)size->n;
  int64_t n = 1, want = 1;
  for (size_t k = size->n; k-- > 0;) {
    if (!is_int(size->items[k]) || !is_int(stride->items[k]) || size->items[k]->i < 0 ||
        size->items[k]->i > ((int64_t)1 << 40)) {
      bad(m, "bad tensor size or stride");
      return NULL;
    }
    v->t->shape[k] = size->items[k]->i;
    if (size->items[k]->i > 1 && stride->items[k]->i != want) {
      cm_diag_set(m->diag, -CM_EUNSUPPORTED, "data.pkl: a tensor is not contiguous");
      return NULL;
    }
    want *= size->items[k]->i;
    n *= size->items[k]->i;
    if (n > ((int64_t)1 << 40)) {
      bad(m, "tensor too large");
      return NULL;
    }
  }
  v->t->n_elems = n;
  return v;
}

static int op_reduce(struct vm *m) {
  struct value *args = pop(m), *fn = pop(m);
  if (!args || !fn)
    return bad(m, "REDUCE on a short stack");
  if (is_global(fn, "collections.OrderedDict") && args->kind == V_TUPLE && args->n == 0)
    return push(m, mk(m, V_DICT));
  if (is_global(fn, "torch._utils._rebuild_tensor_v2"))
    return push(m, rebuild_tensor(m, args));
  if (is_global(fn, "torch._utils._rebuild_parameter") && args->kind == V_TUPLE && args->n >= 1 &&
      args->items[0]->kind == V_TENSOR)
    return push(m, args->items[0]);
  return cm_diag_set(m->diag, -CM_EUNSUPPORTED, "data.pkl: call of %s is not supported",
                     fn->kind == V_GLOBAL ? fn->s : "a non-global");
}

static int64_t rd_le(const uint8_t *p, size_t n) {
  uint64_t u = 0;
  for (size_t k = 0; k < n; k++)
    u |= (uint64_t)p[k] << (8 * k);
  if (n < 8 && n > 0 && (p[n - 1] & 0x80))
    u |= ~(uint64_t)0 << (8 * n);
  return (int64_t)u;
}

static int op_memo_put(struct vm *m, size_t idx) {
  if (!m->n_stack)
    return bad(m, "PUT on an empty stack");
  if (idx > EX_PT_MAX_VALUES)
    return bad(m, "memo index too large");
  if (idx >= m->n_memo) {
    struct value **nm = realloc(m->memo, (idx + 1) * sizeof *nm);
    if (!nm)
      return -ENOMEM;
    for (size_t k = m->n_memo; k <= idx; k++)
      nm[k] = NULL;
    m->memo = nm;
    m->n_memo = idx + 1;
  }
  m->memo[idx] = m->stack[m->n_stack - 1];
  return 0;
}

static int op_memo_get(struct vm *m, size_t idx) {
  if (idx >= m->n_memo || !m->memo[idx])
    return bad(m, "GET of an unset memo entry");
  return push(m, m->memo[idx]);
}

/* Pops to the last MARK into a new container of kind k (or into `into` for SETITEMS/APPENDS). */
static int pop_mark(struct vm *m, struct value *into, enum vkind k) {
  if (!m->n_marks)
    return bad(m, "no MARK");
  size_t from = m->marks[--m->n_marks];
  struct value *c = into;
  if (!c && !(c = mk(m, k)))
    return -ENOMEM;
  if (into && into->kind == V_DICT && (m->n_stack - from) % 2)
    return bad(m, "SETITEMS with an odd count");
  for (size_t i = from; i < m->n_stack; i++)
    if (add_item(c, m->stack[i]))
      return -ENOMEM;
  m->n_stack = from;
  return into ? 0 : push(m, c);
}

static int run_pickle(struct vm *m, struct value **ret) {
  while (m->p < m->end) {
    uint8_t op = *m->p++;
    int rc = 0;
    size_t n;
    struct value *a, *b, *c;
    switch (op) {
    case 0x80: rc = need(m, 1); m->p += rc ? 0 : 1; break;        /* PROTO */
    case 0x95: rc = need(m, 8); m->p += rc ? 0 : 8; break;        /* FRAME */
    case '}': rc = push(m, mk(m, V_DICT)); break;                   /* EMPTY_DICT */
    case ']': rc = push(m, mk(m, V_LIST)); break;                   /* EMPTY_LIST */
    case ')': rc = push(m, mk(m, V_TUPLE)); break;                  /* EMPTY_TUPLE */
    case 'N': rc = push(m, mk(m, V_NONE)); break;
    case 0x88:
    case 0x89:
      if ((a = mk(m, V_BOOL)))
        a->i = op == 0x88;
      rc = push(m, a);
      break;
    case '(':
      if (grow((void **)&m->marks, &m->cap_marks, m->n_marks + 1, sizeof *m->marks))
        return -ENOMEM;
      m->marks[m->n_marks++] = m->n_stack;
      break;
    case 't': rc = pop_mark(m, NULL, V_TUPLE); break;
    case 'l': rc = pop_mark(m, NULL, V_LIST); break;
    case 0x85:
    case 0x86:
    case 0x87: {
      size_t k = (size_t)(op - 0x84);
      struct value *items[3];
      for (size_t i = k; i-- > 0;)
        if (!(items[i] = pop(m)))
          return bad(m, "TUPLEn on a short stack");
      if (!(a = mk(m, V_TUPLE)))
        return -ENOMEM;
      for (size_t i = 0; i < k; i++)
        if (add_item(a, items[i]))
          return -ENOMEM;
      rc = push(m, a);
      break;
    }
    case 'X':
    case 'T':
      if ((rc = need(m, 4)))
        break;
      n = rd32(m->p);
      m->p += 4;
      if ((rc = need(m, n)))
        break;
      rc = push(m, mkstr(m, m->p, n, V_STR));
      m->p += n;
      break;
    case 0x8c:
    case 'U':
      if ((rc = need(m, 1)))
        break;
      n = *m->p++;
      if ((rc = need(m, n)))
        break;
      rc = push(m, mkstr(m, m->p, n, V_STR));
      m->p += n;
      break;
    case 'J':
    case 'K':
    case 'M':
      n = op == 'J' ? 4 : op == 'K' ? 1 : 2;
      if ((rc = need(m, n)))
        break;
      if ((a = mk(m, V_INT)))
        a->i = op == 'J' ? rd_le(m->p, 4) : (int64_t)(op == 'K' ? m->p[0] : rd16(m->p));
      m->p += n;
      rc = push(m, a);
      break;
    case 0x8a: /* LONG1 */
      if ((rc = need(m, 1)))
        break;
      n = *m->p++;
      if (n > 8)
        return cm_diag_set(m->diag, -CM_EUNSUPPORTED, "data.pkl: integer wider than 64 bits");
      if ((rc = need(m, n)))
        break;
      if ((a = mk(m, V_INT)))
        a->i = rd_le(m->p, n);
      m->p += n;
      rc = push(m, a);
      break;
    case 'G': {
      if ((rc = need(m, 8)))
        break;
      uint64_t u = 0;
      for (int k = 0; k < 8; k++)
        u = u << 8 | m->p[k];
      m->p += 8;
      if ((a = mk(m, V_FLOAT)))
        memcpy(&a->f, &u, 8);
      rc = push(m, a);
      break;
    }
    case 'c': { /* GLOBAL module\nname\n */
      const uint8_t *nl1 = memchr(m->p, '\n', (size_t)(m->end - m->p));
      const uint8_t *nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(m->end - nl1 - 1)) : NULL;
      if (!nl2)
        return bad(m, "unterminated GLOBAL");
      size_t l1 = (size_t)(nl1 - m->p), l2 = (size_t)(nl2 - nl1 - 1);
      if (l1 + l2 > 200)
        return bad(m, "GLOBAL name too long");
      uint8_t buf[208];
      memcpy(buf, m->p, l1);
      buf[l1] = '.';
      memcpy(buf + l1 + 1, nl1 + 1, l2);
      rc = push(m, mkstr(m, buf, l1 + 1 + l2, V_GLOBAL));
      m->p = nl2 + 1;
      break;
    }
    case 0x93: /* STACK_GLOBAL */
      b = pop(m);
      a = pop(m);
      if (!a || !b || a->kind != V_STR || b->kind != V_STR || a->len + b->len > 200)
        return bad(m, "bad STACK_GLOBAL");
      {
        uint8_t buf[208];
        memcpy(buf, a->s, a->len);
        buf[a->len] = '.';
        memcpy(buf + a->len + 1, b->s, b->len);
        rc = push(m, mkstr(m, buf, a->len + 1 + b->len, V_GLOBAL));
      }
      break;
    case 'Q': /* BINPERSID */
      if (!(a = pop(m)) || a->kind != V_TUPLE)
        return bad(m, "BINPERSID without a tuple");
      if ((b = mk(m, V_PERSID)))
        b->pid = a;
      rc = push(m, b);
      break;
    case 'R': rc = op_reduce(m); break;
    case 'b': /* BUILD: state of an OrderedDict (_metadata) or a tensor is ignored */
      a = pop(m);
      if (!a || !m->n_stack ||
          (m->stack[m->n_stack - 1]->kind != V_DICT && m->stack[m->n_stack - 1]->kind != V_TENSOR))
        return cm_diag_set(m->diag, -CM_EUNSUPPORTED, "data.pkl: BUILD of an unsupported object");
      break;
    case 's': /* SETITEM */
      b = pop(m);
      a = pop(m);
      if (!a || !b || !m->n_stack || (c = m->stack[m->n_stack - 1])->kind != V_DICT)
        return bad(m, "SETITEM outside a dict");
      rc = add_item(c, a) || add_item(c, b) ? -ENOMEM : 0;
      break;
    case 'u':
    case 'e': {
      if (!m->n_marks || m->marks[m->n_marks - 1] == 0)
        return bad(m, "SETITEMS/APPENDS without a target");
      c = m->stack[m->marks[m->n_marks - 1] - 1];
      if (c->kind != (op == 'u' ? V_DICT : V_LIST))
        return bad(m, "SETITEMS/APPENDS on the wrong type");
      rc = pop_mark(m, c, c->kind);
      break;
    }
    case 'a':
      b = pop(m);
      if (!b || !m->n_stack || (c = m->stack[m->n_stack - 1])->kind != V_LIST)
        return bad(m, "APPEND outside a list");
      rc = add_item(c, b);
      break;
    case 'q':
      if ((rc = need(m, 1)))
        break;
      rc = op_memo_put(m, *m->p++);
      break;
    case 'r':
      if ((rc = need(m, 4)))
        break;
      rc = op_memo_put(m, rd32(m->p));
      m->p += 4;
      break;
    case 0x94: rc = op_memo_put(m, m->n_memo); break; /* MEMOIZE */
    case 'h':
      if ((rc = need(m, 1)))
        break;
      rc = op_memo_get(m, *m->p++);
      break;
    case 'j':
      if ((rc = need(m, 4)))
        break;
      rc = op_memo_get(m, rd32(m->p));
      m->p += 4;
      break;
    case '.':
      if (m->n_stack != 1 || m->n_marks)
        return bad(m, "STOP with a stack that is not one value");
      *ret = m->stack[0];
      return 0;
    default:
      m->p--;
      return cm_diag_set(m->diag, -CM_EUNSUPPORTED, "data.pkl: opcode 0x%02x at byte %zu is not "
                                                    "supported", op, (size_t)(m->p - m->start));
    }
    if (rc)
      return rc;
  }
  return bad(m, "no STOP");
}

/* ---- state dict ------------------------------------------------------------------------------ */

static const struct zentry *zfind(const struct zentry *e, size_t n, const char *prefix, size_t pl,
                                  const char *rest) {
  size_t rl = strlen(rest);
  for (size_t i = 0; i < n; i++)
    if (e[i].name_len == pl + rl && memcmp(e[i].name, prefix, pl) == 0 &&
        memcmp(e[i].name + pl, rest, rl) == 0)
      return &e[i];
  return NULL;
}

static int fill_tensor(const struct value *v, const struct zentry *e, size_t ne, const char *pre,
                       size_t pl, struct cm_diag *diag) {
  const struct value *pid = v->storage;
  struct ex_pt_tensor *t = v->t;
  if (pid->n != 5 || pid->items[0]->kind != V_STR || strcmp(pid->items[0]->s, "storage") != 0 ||
      pid->items[1]->kind != V_GLOBAL || pid->items[2]->kind != V_STR || !is_int(pid->items[4]))
    return cm_diag_set(diag, -CM_EFORMAT, "data.pkl: tensor '%s': bad storage id", t->name);
  const char *type = pid->items[1]->s;
  size_t es;
  if (strcmp(type, "torch.FloatStorage") == 0)
    t->dtype = CM_DTYPE_F32, es = 4;
  else if (strcmp(type, "torch.HalfStorage") == 0)
    t->dtype = CM_DTYPE_F16, es = 2;
  else if (strcmp(type, "torch.BFloat16Storage") == 0)
    t->dtype = CM_DTYPE_BF16, es = 2;
  else
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "tensor '%s': storage type %s is not supported",
                       t->name, type);
  char rest[300];
  if (pid->items[2]->len > 200 || strchr(pid->items[2]->s, '/'))
    return cm_diag_set(diag, -CM_EFORMAT, "tensor '%s': bad storage key", t->name);
  snprintf(rest, sizeof rest, "data/%s", pid->items[2]->s);
  const struct zentry *z = zfind(e, ne, pre, pl, rest);
  if (!z)
    return cm_diag_set(diag, -CM_EFORMAT, "tensor '%s': storage entry '%.*s%s' missing", t->name,
                       (int)pl, pre, rest);
  int64_t numel = pid->items[4]->i;
  if (numel < 0 || (uint64_t)numel * es > z->size || v->offset < 0 || v->offset > numel ||
      t->n_elems > numel - v->offset)
    return cm_diag_set(diag, -CM_EFORMAT, "tensor '%s': storage too short for its shape", t->name);
  t->data = malloc((size_t)(t->n_elems ? t->n_elems : 1) * sizeof *t->data);
  if (!t->data)
    return -ENOMEM;
  struct cm_tensor_view view = {.dtype = t->dtype, .n_elems = t->n_elems,
                                .data = z->data + (size_t)v->offset * es,
                                .n_bytes = (size_t)t->n_elems * es};
  return cm_tensor_to_f32(&view, t->data);
}

int ex_pt_read(const uint8_t *bytes, size_t n_bytes, struct ex_pt_state *ret_state,
               struct cm_diag *diag) {
  struct zentry *e = NULL;
  size_t ne = 0;
  struct vm m = {.diag = diag};
  struct ex_pt_state st = {0};
  if (n_bytes > EX_PT_MAX_BYTES)
    return cm_diag_set(diag, -CM_ELIMIT, "file of %zu bytes exceeds %zu", n_bytes, EX_PT_MAX_BYTES);
  int rc = zip_entries(bytes, n_bytes, &e, &ne, diag);
  if (rc)
    return rc;
  const struct zentry *pkl = NULL;
  for (size_t i = 0; i < ne && !pkl; i++) {
    const char *slash = memchr(e[i].name, '/', e[i].name_len);
    if (slash && (size_t)(slash - e[i].name) + 1 + 8 == e[i].name_len &&
        memcmp(slash + 1, "data.pkl", 8) == 0)
      pkl = &e[i];
  }
  if (!pkl) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "no <name>/data.pkl entry: not a torch.save zip file");
    goto out;
  }
  size_t pl = pkl->name_len - 8;
  m.start = m.p = pkl->data;
  m.end = pkl->data + pkl->size;
  struct value *root = NULL;
  rc = run_pickle(&m, &root);
  if (rc)
    goto out;
  if (root->kind == V_TENSOR) { /* torch.save(tensor): one tensor, named "" */
    st.tensors = calloc(1, sizeof *st.tensors);
    if (!st.tensors || !(root->t->name = strdup(""))) {
      rc = -ENOMEM;
      goto out;
    }
    if ((rc = fill_tensor(root, e, ne, pkl->name, pl, diag)))
      goto out;
    st.tensors[0] = *root->t; /* moves name and data */
    root->t->name = NULL;
    root->t->data = NULL;
    st.n_tensors = 1;
    *ret_state = st;
    st.tensors = NULL;
    st.n_tensors = 0;
    goto out;
  }
  if (root->kind != V_DICT) {
    rc = cm_diag_set(diag, -CM_EFORMAT, "data.pkl: the top object is neither a dict nor a tensor");
    goto out;
  }
  size_t nt = root->n / 2;
  if (nt > EX_PT_MAX_TENSORS) {
    rc = cm_diag_set(diag, -CM_ELIMIT, "state dict has %zu tensors (limit %d)", nt,
                     EX_PT_MAX_TENSORS);
    goto out;
  }
  st.tensors = calloc(nt ? nt : 1, sizeof *st.tensors);
  if (!st.tensors) {
    rc = -ENOMEM;
    goto out;
  }
  for (size_t i = 0; i < nt; i++) {
    struct value *k = root->items[2 * i], *v = root->items[2 * i + 1];
    if (k->kind != V_STR || v->kind != V_TENSOR) {
      rc = cm_diag_set(diag, -CM_EFORMAT, "data.pkl: entry %zu is not a named tensor", i);
      goto out;
    }
    for (size_t j = 0; j < i; j++) {
      if (strcmp(st.tensors[j].name, k->s) == 0) {
        rc = cm_diag_set(diag, -CM_EFORMAT, "data.pkl: tensor '%s' twice", k->s);
        goto out;
      }
    }
    if (v->t->name || v->t->data) {
      rc = cm_diag_set(diag, -CM_EFORMAT, "data.pkl: one tensor object under two names");
      goto out;
    }
    if (!(v->t->name = strdup(k->s))) {
      rc = -ENOMEM;
      goto out;
    }
    rc = fill_tensor(v, e, ne, pkl->name, pl, diag);
    if (rc)
      goto out;
    st.tensors[i] = *v->t; /* moves name and data */
    v->t->name = NULL;
    v->t->data = NULL;
    st.n_tensors = i + 1;
  }
  *ret_state = st;
  st.tensors = NULL;
  st.n_tensors = 0;
out:
  ex_pt_state_fini(&st);
  for (size_t i = 0; i < m.n_pool; i++)
    value_free(m.pool[i]);
  free(m.pool);
  free(m.stack);
  free(m.marks);
  free(m.memo);
  free(e);
  return rc;
}

int ex_pt_read_file(const char *path, struct ex_pt_state *ret_state, struct cm_diag *diag) {
  FILE *f = fopen(path, "rb");
  if (!f)
    return cm_diag_set(diag, errno == ENOENT ? -ENOENT : -EIO, "%s: %s", path, strerror(errno));
  int rc = 0;
  uint8_t *buf = NULL;
  long sz = -1;
  if (fseek(f, 0, SEEK_END) == 0)
    sz = ftell(f);
  if (sz < 0 || fseek(f, 0, SEEK_SET) != 0) {
    rc = cm_diag_set(diag, -EIO, "%s: cannot size the file", path);
  } else if ((size_t)sz > EX_PT_MAX_BYTES) {
    rc = cm_diag_set(diag, -CM_ELIMIT, "%s: %ld bytes exceeds %zu", path, sz, EX_PT_MAX_BYTES);
  } else if (!(buf = malloc((size_t)sz + 1))) {
    rc = -ENOMEM;
  } else if (fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
    rc = cm_diag_set(diag, -EIO, "%s: read failed", path);
  } else {
    rc = ex_pt_read(buf, (size_t)sz, ret_state, diag);
    if (rc && diag && diag->msg) {
      char *m = diag->msg;
      diag->msg = NULL;
      diag->code = 0;
      cm_diag_set(diag, rc, "%s: %s", path, m);
      free(m);
    }
  }
  free(buf);
  fclose(f);
  return rc;
}

const struct ex_pt_tensor *ex_pt_find(const struct ex_pt_state *state, const char *name) {
  for (size_t i = 0; i < state->n_tensors; i++)
    if (strcmp(state->tensors[i].name, name) == 0)
      return &state->tensors[i];
  return NULL;
}

void ex_pt_state_fini(struct ex_pt_state *state) {
  if (!state)
    return;
  for (size_t i = 0; i < state->n_tensors; i++) {
    free(state->tensors[i].name);
    free(state->tensors[i].data);
  }
  free(state->tensors);
  state->tensors = NULL;
  state->n_tensors = 0;
}
