/*
 * Cold-chunk aging and refault feedback on synthetic access traces.  A
 * small model plays the kernel: a chunk we page out has no resident
 * pages until the trace touches it again, which brings it back in and is
 * reported as referenced (a refault).
 */
#include <check.h>

#include "check_run.h"
#include <stdlib.h>
#include <string.h>

#include "policies/cold_lru.h"

#define PAGE 4096ULL
#define CHUNK (2ULL * 1024 * 1024)
#define PAGES_PER_CHUNK ((uint32_t)(CHUNK / PAGE))
#define MIB (1024ULL * 1024ULL)

typedef bool (*trace_fn)(size_t chunk, uint32_t scan);

typedef struct {
    cold_lru l;
    chunk_obs *obs;
    bool *out;            /* model: paged out and not touched since */
    uint64_t evicted_bytes;
    size_t refaults;
} model;

static void model_init(model *m, size_t n, const cold_tunables *t)
{
    memset(m, 0, sizeof(*m));
    ck_assert_int_eq(cold_lru_init(&m->l, n, CHUNK, PAGE, t), 0);
    m->obs = calloc(n, sizeof(*m->obs));
    m->out = calloc(n, sizeof(*m->out));
}

static void model_free(model *m)
{
    cold_lru_free(&m->l);
    free(m->obs);
    free(m->out);
}

/* One scan: observe the trace, age, page out what is picked. */
static void model_scan(model *m, trace_fn touched, uint32_t scan, uint64_t budget)
{
    size_t n = m->l.n_chunks;
    for (size_t i = 0; i < n; i++) {
        bool t = touched(i, scan);
        /* a touched chunk that was out comes back whole */
        m->obs[i].back_pages = t && m->out[i] ? PAGES_PER_CHUNK : 0;
        if (t)
            m->out[i] = false;
        m->obs[i].referenced = t;
        m->obs[i].resident_pages = m->out[i] ? 0 : PAGES_PER_CHUNK;
    }
    m->refaults += cold_lru_age(&m->l, m->obs);
    size_t *pick = calloc(n, sizeof(*pick));
    uint64_t bytes;
    size_t k = cold_lru_pick(&m->l, m->obs, budget, pick, n, &bytes);
    for (size_t j = 0; j < k; j++) {
        cold_lru_mark_evicted(&m->l, pick[j], CHUNK);
        m->out[pick[j]] = true;
    }
    m->evicted_bytes += bytes;
    free(pick);
}

static size_t count_out(const model *m, size_t from, size_t to)
{
    size_t c = 0;
    for (size_t i = from; i < to; i++)
        c += m->out[i];
    return c;
}

/* chunks 0..79 touched once at scan 0; 80..99 every scan */
static bool hot_cold(size_t c, uint32_t s) { return c >= 80 || s == 0; }

START_TEST(cold_set_goes_out_hot_set_stays)
{
    cold_tunables t;
    cold_tunables_default(&t);
    model m;
    model_init(&m, 100, &t);
    for (uint32_t s = 0; s < 30; s++)
        model_scan(&m, hot_cold, s, UINT64_MAX);
    ck_assert_uint_eq(count_out(&m, 0, 80), 80);
    ck_assert_uint_eq(count_out(&m, 80, 100), 0);
    ck_assert_uint_eq(m.refaults, 0);
    ck_assert_uint_eq(m.evicted_bytes, 80 * CHUNK);
    ck_assert_uint_eq(m.l.evictions_total, 80);
    model_free(&m);
}
END_TEST

START_TEST(nothing_goes_before_cold_age)
{
    cold_tunables t;
    cold_tunables_default(&t);
    t.min_cold_age = 5;
    model m;
    model_init(&m, 100, &t);
    /* scan 0 touches everything; chunks go inactive at scan 1 (idle 1) and
     * reach idle 5 at scan 5 */
    for (uint32_t s = 0; s < 5; s++) {
        model_scan(&m, hot_cold, s, UINT64_MAX);
        ck_assert_uint_eq(count_out(&m, 0, 100), 0);
    }
    model_scan(&m, hot_cold, 5, UINT64_MAX);
    ck_assert_uint_eq(count_out(&m, 0, 80), 80);
    model_free(&m);
}
END_TEST

START_TEST(second_chance_then_activation)
{
    cold_tunables t;
    cold_tunables_default(&t);
    cold_lru l;
    ck_assert_int_eq(cold_lru_init(&l, 1, CHUNK, PAGE, &t), 0);
    chunk_obs o = { .referenced = false, .resident_pages = PAGES_PER_CHUNK };
    cold_lru_age(&l, &o);
    ck_assert_int_eq(l.chunks[0].list, CHUNK_INACTIVE);
    cold_lru_age(&l, &o);
    ck_assert_uint_eq(l.chunks[0].idle_scans, 2);
    o.referenced = true;
    cold_lru_age(&l, &o);       /* first reference on the inactive list */
    ck_assert_int_eq(l.chunks[0].list, CHUNK_INACTIVE);
    ck_assert(l.chunks[0].second_chance);
    ck_assert_uint_eq(l.chunks[0].idle_scans, 0);
    cold_lru_age(&l, &o);       /* second: back to active */
    ck_assert_int_eq(l.chunks[0].list, CHUNK_ACTIVE);
    cold_lru_free(&l);
}
END_TEST

/* chunk 0..9 touched every 7 scans: a reuse distance longer than the
 * starting threshold of 3 */
static bool periodic(size_t c, uint32_t s) { return c < 10 ? s % 7 == 0 : s == 0; }

START_TEST(refault_raises_threshold_and_cuts_budget)
{
    cold_tunables t;
    cold_tunables_default(&t);
    t.calm_scans = 1000; /* no relaxing during this test */
    model m;
    model_init(&m, 40, &t);
    for (uint32_t s = 0; s < 100; s++)
        model_scan(&m, periodic, s, UINT64_MAX);
    /* the periodic chunks were paged out once at idle 3 and came back at
     * distance 6: one round of refaults, then the threshold (7) keeps them */
    ck_assert_uint_eq(m.refaults, 10);
    ck_assert_uint_eq(m.l.refault_pages_total, 10 * PAGES_PER_CHUNK);
    ck_assert_uint_eq(m.l.cold_age, 7);
    ck_assert_uint_eq(m.l.budget_bytes, t.max_budget_bytes / 2);
    ck_assert_uint_eq(count_out(&m, 0, 10), 0);
    ck_assert_uint_eq(count_out(&m, 10, 40), 30);
    model_free(&m);
}
END_TEST

START_TEST(calm_relaxes_back)
{
    cold_tunables t;
    cold_tunables_default(&t);
    t.calm_scans = 2;
    model m;
    model_init(&m, 40, &t);
    for (uint32_t s = 0; s < 20; s++)
        model_scan(&m, periodic, s, UINT64_MAX);
    ck_assert_uint_gt(m.refaults, 0);
    /* the periodic chunks stop being used: the threshold decays to the
     * minimum and the budget grows back to the maximum */
    for (uint32_t s = 20; s < 200; s++)
        model_scan(&m, hot_cold, s, UINT64_MAX);
    ck_assert_uint_eq(m.l.cold_age, t.min_cold_age);
    ck_assert_uint_eq(m.l.budget_bytes, t.max_budget_bytes);
    ck_assert_uint_eq(count_out(&m, 0, 40), 40);
    model_free(&m);
}
END_TEST

/* chunk c was last touched at scan c (so chunk 0 is the oldest) */
static bool staircase(size_t c, uint32_t s) { return s == c; }

START_TEST(budget_oldest_first)
{
    cold_tunables t;
    cold_tunables_default(&t);
    cold_lru l;
    ck_assert_int_eq(cold_lru_init(&l, 10, CHUNK, PAGE, &t), 0);
    chunk_obs obs[10];
    for (uint32_t s = 0; s < 12; s++) {
        for (size_t i = 0; i < 10; i++)
            obs[i] = (chunk_obs){ staircase(i, s), PAGES_PER_CHUNK, 0 };
        cold_lru_age(&l, obs);
    }
    size_t out[10];
    uint64_t bytes;
    size_t k = cold_lru_pick(&l, obs, 3 * CHUNK, out, 10, &bytes);
    ck_assert_uint_eq(k, 3);
    ck_assert_uint_eq(bytes, 3 * CHUNK);
    ck_assert_uint_eq(out[0], 0);
    ck_assert_uint_eq(out[1], 1);
    ck_assert_uint_eq(out[2], 2);
    /* the feedback budget also caps: cut it to one chunk */
    l.budget_bytes = CHUNK;
    k = cold_lru_pick(&l, obs, UINT64_MAX, out, 10, &bytes);
    ck_assert_uint_eq(k, 1);
    /* max_out caps too */
    l.budget_bytes = UINT64_MAX;
    k = cold_lru_pick(&l, obs, UINT64_MAX, out, 2, &bytes);
    ck_assert_uint_eq(k, 2);
    /* chunks idle 11..3 qualify at threshold 3: 0..8 */
    ck_assert_uint_eq(cold_lru_cold_bytes(&l, obs), 9 * CHUNK);
    /* a chunk with nothing resident is no candidate */
    obs[0].resident_pages = 0;
    ck_assert_uint_eq(cold_lru_cold_bytes(&l, obs), 8 * CHUNK);
    cold_lru_free(&l);
}
END_TEST

/* One chunk, idle for 5 scans, then paged out whole. */
static void one_evicted_chunk(cold_lru *l)
{
    cold_tunables t;
    cold_tunables_default(&t);
    ck_assert_int_eq(cold_lru_init(l, 1, CHUNK, PAGE, &t), 0);
    chunk_obs o = { false, PAGES_PER_CHUNK, 0 };
    for (int s = 0; s < 5; s++)
        cold_lru_age(l, &o);
    cold_lru_mark_evicted(l, 0, CHUNK);
}

START_TEST(partial_pageout_keeps_aging)
{
    cold_lru l;
    one_evicted_chunk(&l);
    chunk_obs o = { false, 10, 0 }; /* some pages did not go out */
    cold_lru_age(&l, &o);
    ck_assert_int_eq(l.chunks[0].list, CHUNK_EVICTED);
    cold_lru_age(&l, &o);
    ck_assert_int_eq(l.chunks[0].list, CHUNK_INACTIVE);
    ck_assert_uint_ge(l.chunks[0].idle_scans, 5);
    size_t out;
    uint64_t bytes;
    ck_assert_uint_eq(cold_lru_pick(&l, &o, UINT64_MAX, &out, 1, &bytes), 1);
    ck_assert_uint_eq(bytes, 10 * PAGE);
    ck_assert_uint_eq(l.refaults_total, 0);
    cold_lru_free(&l);
}
END_TEST

/* A few pages back (too few for a refault) are a use: the chunk ages
 * again from the start instead of being paged out at once. */
START_TEST(few_pages_back_age_from_the_start)
{
    cold_lru l;
    one_evicted_chunk(&l);
    chunk_obs o = { false, 3, 3 }; /* 3 pages came back */
    ck_assert_uint_eq(cold_lru_age(&l, &o), 0);
    ck_assert_int_eq(l.chunks[0].list, CHUNK_INACTIVE);
    ck_assert_uint_eq(l.chunks[0].idle_scans, 0);
    size_t out;
    uint64_t bytes;
    for (uint32_t s = 0; s + 1 < l.cold_age; s++) {
        o.back_pages = 0;
        cold_lru_age(&l, &o);
        ck_assert_uint_eq(cold_lru_pick(&l, &o, UINT64_MAX, &out, 1, &bytes), 0);
    }
    cold_lru_age(&l, &o);
    ck_assert_uint_eq(cold_lru_pick(&l, &o, UINT64_MAX, &out, 1, &bytes), 1);
    ck_assert_uint_eq(l.refaults_total, 0);
    cold_lru_free(&l);
}
END_TEST

START_TEST(long_reuse_is_not_a_refault)
{
    cold_tunables t;
    cold_tunables_default(&t);
    t.max_cold_age = 10;
    cold_lru l;
    ck_assert_int_eq(cold_lru_init(&l, 1, CHUNK, PAGE, &t), 0);
    chunk_obs o = { false, PAGES_PER_CHUNK, 0 };
    for (int s = 0; s < 4; s++)
        cold_lru_age(&l, &o);
    cold_lru_mark_evicted(&l, 0, CHUNK);
    o.resident_pages = 0;
    for (int s = 0; s < 20; s++)
        cold_lru_age(&l, &o);
    o.referenced = true;
    o.resident_pages = PAGES_PER_CHUNK;
    ck_assert_uint_eq(cold_lru_age(&l, &o), 0);
    ck_assert_int_eq(l.chunks[0].list, CHUNK_ACTIVE);
    ck_assert_uint_eq(l.cold_age, t.min_cold_age);
    cold_lru_free(&l);
}
END_TEST

START_TEST(init_rejects_bad_sizes)
{
    cold_tunables t;
    cold_tunables_default(&t);
    cold_lru l;
    ck_assert_int_eq(cold_lru_init(&l, 0, CHUNK, PAGE, &t), -1);
    ck_assert_int_eq(cold_lru_init(&l, 4, 3 * MIB, PAGE, &t), -1);
    ck_assert_int_eq(cold_lru_init(&l, 4, PAGE, CHUNK, &t), -1);
    cold_lru_free(&l);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cold_lru");
    TCase *tc = tcase_create("aging");
    tcase_add_test(tc, cold_set_goes_out_hot_set_stays);
    tcase_add_test(tc, nothing_goes_before_cold_age);
    tcase_add_test(tc, second_chance_then_activation);
    tcase_add_test(tc, refault_raises_threshold_and_cuts_budget);
    tcase_add_test(tc, calm_relaxes_back);
    tcase_add_test(tc, budget_oldest_first);
    tcase_add_test(tc, partial_pageout_keeps_aging);
    tcase_add_test(tc, few_pages_back_age_from_the_start);
    tcase_add_test(tc, long_reuse_is_not_a_refault);
    tcase_add_test(tc, init_rejects_bad_sizes);
    suite_add_tcase(s, tc);
    return check_run_suite(s, CK_FORK);
}
