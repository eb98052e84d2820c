/* The daemon's error domain; see error.h. */
#include "util/error.h"

G_DEFINE_QUARK(membal-error-quark, membal_error)
