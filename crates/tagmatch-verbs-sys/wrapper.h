/* Everything tagmatch-verbs-sys binds: the verbs API (including the static inline functions,
 * which bindgen's wrap_static_fns turns into real symbols) and the tag-matching wire types. */
#include <infiniband/verbs.h>
#include <infiniband/tm_types.h>
