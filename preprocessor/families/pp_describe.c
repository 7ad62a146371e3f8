/* What the families' /v1/models entries share beyond the head pp_model_load writes (pp_family.h);
 * in the families' library so that a family links without the preprocessor's table. */
#include "pp_family.h"

json_object *pp_describe_range(int64_t lo, int64_t hi) {
  json_object *a = json_object_new_array();
  if (a) {
    json_object_array_add(a, json_object_new_int64(lo));
    json_object_array_add(a, json_object_new_int64(hi));
  }
  return a;
}
