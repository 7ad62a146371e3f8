/* The family table of the preprocessor (one line per family; the names are cm_family.h's) and
 * the loading every family shares: the tokenizer and the head of the /v1/models entry. */
#include "pp_family.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

extern const struct pp_family pp_family_open_jev; /* families/open_jev/ */
extern const struct pp_family pp_family_omnijev;  /* families/omnijev/ */
extern const struct pp_family pp_family_jemm;     /* families/jemm/ */

static const struct pp_family *const families[] = {
    &pp_family_open_jev,
    &pp_family_omnijev,
    &pp_family_jemm,
    NULL,
};

const struct pp_family *pp_family_find(const char *name) {
  for (size_t i = 0; name && families[i]; i++)
    if (strcmp(families[i]->name, name) == 0)
      return families[i];
  return NULL;
}

const struct pp_family *const *pp_families(void) {
  return families;
}

/* {id, aliases, family, question_types} of a model's /v1/models entry. */
static json_object *describe_head(const struct pp_family *f, const struct pp_model_desc *desc) {
  json_object *d = json_object_new_object(), *al = json_object_new_array(),
              *types = json_object_new_array();
  if (!d || !al || !types) {
    json_object_put(d);
    json_object_put(al);
    json_object_put(types);
    return NULL;
  }
  json_object_object_add(d, "id", json_object_new_string(desc->id));
  for (size_t i = 0; i < desc->n_aliases; i++)
    json_object_array_add(al, json_object_new_string(desc->aliases[i]));
  json_object_object_add(d, "aliases", al);
  json_object_object_add(d, "family", json_object_new_string(f->name));
  for (size_t i = 0; f->question_types[i]; i++)
    json_object_array_add(types, json_object_new_string(f->question_types[i]));
  json_object_object_add(d, "question_types", types);
  return d;
}

int pp_model_load(const struct cm_model_dir *dir, struct pp_model **ret_model,
                  struct cm_diag *diag) {
  const struct pp_family *f = pp_family_find(dir->family);
  if (!f)
    return cm_diag_set(diag, -CM_EUNSUPPORTED, "%s: family \"%s\" has no preprocessor family in "
                       "this build", dir->path, dir->family);
  struct pp_model *m = calloc(1, sizeof *m);
  if (!m)
    return -ENOMEM;
  m->family = f;
  int rc = pp_tok_load_file(dir->tokenizer_path, &m->tok, diag);
  if (!rc)
    rc = f->load(dir, m->tok, &m->state, &m->desc, diag);
  if (!rc && !(m->desc.describe = describe_head(f, &m->desc)))
    rc = -ENOMEM;
  if (rc) {
    pp_model_free(m);
    return rc;
  }
  f->describe(m->state, m->desc.describe);
  *ret_model = m;
  return 0;
}

void pp_model_free(struct pp_model *model) {
  if (!model)
    return;
  if (model->state)
    model->family->free(model->state);
  json_object_put(model->desc.describe);
  pp_tok_free(model->tok);
  free(model);
}
