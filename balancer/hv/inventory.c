/* Helpers over the core's guest list for the backends; see backend.h. */
#include "hv/backend.h"

void hv_mark_unseen(const hv_ctx *hv)
{
    for (size_t i = 0; i < hv->inv->count(hv->inv_ctx); i++)
        hv->inv->at(hv->inv_ctx, i)->seen = false;
}

void hv_drop_unseen(const hv_ctx *hv)
{
    for (size_t i = hv->inv->count(hv->inv_ctx); i-- > 0;) {
        hv_guest *g = hv->inv->at(hv->inv_ctx, i);
        if (!g->seen)
            hv->inv->remove(hv->inv_ctx, g);
    }
}
