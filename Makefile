# membal: guest memory balancer for KVM hosts.
#
#   make deps    install every build/test/run dependency (Debian 12, root)
#   make         build balancerd, balancerctl, libqmp and the test programs
#   make check   unit tests (also under valgrind), then real-QEMU integration
#   make asan    the same tests built with -fsanitize=address,undefined
#   make fuzz    run the libFuzzer targets for FUZZ_SECONDS each
#   make guest   build the bootable test guest (kernel + busybox initramfs)

BUILD    ?= build
CC       ?= cc
PKGS     := json-c glib-2.0 libvirt libvirt-qemu libvirt-glib-1.0 libxml-2.0 libmicrohttpd libsystemd
VERSION  := 0.1.0
CHECKPKG := check
SAN      ?=
OPT      ?= -O2
CFLAGS   ?= $(OPT) -g
# -Werror for development builds; a distribution's build (debian/rules:
# WERROR=) warns and goes on, so a newer compiler's new warning does not
# break a package build
WERROR   ?= -Werror
WARN     := -Wall -Wextra $(WERROR) -Wshadow -Wformat=2 -Wmissing-prototypes -Wstrict-prototypes
# Includes name their folder ("util/log.h", "policies/policy.h"); see ARCHITECTURE.md.
CPPFLAGS += -D_GNU_SOURCE -DMEMBAL_VERSION='"$(VERSION)"' -I. -Ibalancer -Itests
ALL_CFLAGS = -std=gnu11 $(WARN) $(CFLAGS) $(SAN) $(CPPFLAGS)

# pkg-config is looked up lazily so `make deps` works before the -dev
# packages exist.
pc_cflags = $(shell pkg-config --cflags $(1) 2>/dev/null)
pc_libs   = $(shell pkg-config --libs $(1) 2>/dev/null)

QMP_SRC      := qmp/qmp_framer.c qmp/qmp_client.c qmp/qmp_send.c qmp/qmp_commands.c
QMP_GLIB_SRC := qmp/qmp_glib.c
QMP_OBJ      := $(QMP_SRC:%.c=$(BUILD)/%.o)
QMP_GLIB_OBJ := $(QMP_GLIB_SRC:%.c=$(BUILD)/%.o)
LIBQMP       := $(BUILD)/libqmp.a
POLICY_SRC   := policies/vm_policy.c policies/registry.c policies/none.c policies/guest_table.c policies/mom.c policies/proxmox.c policies/reclaim_plan.c \
                policies/split_lru.c policies/split_need.c policies/split_tiers.c policies/split_experiment.c policies/split_reuse.c \
                policies/split_headroom.c policies/split_frees_nothing.c policies/split_reads.c policies/split_params.c \
                policies/reason.c policies/classify.c policies/cold_lru.c policies/vmem_plan.c
POLICY_OBJ   := $(POLICY_SRC:%.c=$(BUILD)/%.o)
LIBPOLICY    := $(BUILD)/libpolicy.a

# the daemon's layers (everything but main/), shared by balancerd and the tests
CORE_SRC     := $(foreach d,util config host agent reclaim hv report core,$(sort $(wildcard balancer/$(d)/*.c)))
CORE_OBJ     := $(CORE_SRC:%.c=$(BUILD)/%.o)
LIBCORE      := $(BUILD)/libbalancer.a
CORE_LIBS     = $(call pc_libs,libvirt libvirt-glib-1.0 glib-2.0 json-c libxml-2.0 libsystemd libmicrohttpd) -lm
BALANCERD    := $(BUILD)/balancerd
BALANCERCTL  := $(BUILD)/balancerctl

UNIT_TESTS   := $(BUILD)/tests/check_qmp_framer $(BUILD)/tests/check_qmp_client \
                $(BUILD)/tests/check_policies $(BUILD)/tests/check_split_trackers $(BUILD)/tests/check_balancer \
                $(BUILD)/tests/check_agent $(BUILD)/tests/check_cold_lru $(BUILD)/tests/check_need \
                $(BUILD)/tests/check_backend_qmp $(BUILD)/tests/check_ledgers $(BUILD)/tests/check_fleet \
                $(BUILD)/tests/check_libvirt_xml
REPLAYS      := $(BUILD)/tests/replay_qmp_reader $(BUILD)/tests/replay_agent_line \
                $(BUILD)/tests/replay_metadata_xml $(BUILD)/tests/replay_config \
                $(BUILD)/tests/replay_proc_text $(BUILD)/tests/replay_libvirt_xml
INTEG_TESTS  := $(BUILD)/tests/check_host_reclaim $(BUILD)/tests/check_qemu_qmp $(BUILD)/tests/check_daemon \
                $(BUILD)/tests/check_faults
FAKE_QEMU    := $(BUILD)/tests/fake_qemu
BALLOON_SHIM := $(BUILD)/bench/membal-balloon-shim.so
SIM          := $(BUILD)/bench/membal-sim

.PHONY: all daemon unit-policy deb deb-check bench-deps bench-scale bench-scan bench-fault bench-vmem deps check unit integration valgrind asan fuzz fuzz-smoke guest clean install bench bench-smoke sim soak soak-smoke

all: $(BALANCERD) $(BALANCERCTL) $(SIM) $(LIBQMP) $(UNIT_TESTS) $(REPLAYS) $(INTEG_TESTS) $(FAKE_QEMU) $(BALLOON_SHIM)

# what a package needs: the two programs, nothing of the tests
daemon: $(BALANCERD) $(BALANCERCTL)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(call pc_cflags,$(PKGS)) $(call pc_cflags,$(CHECKPKG)) -MMD -MP -c $< -o $@

$(LIBQMP): $(QMP_OBJ) $(QMP_GLIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(LIBCORE): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BALANCERD): $(BUILD)/balancer/main/balancerd.o $(LIBCORE) $(LIBPOLICY) $(LIBQMP)
	$(CC) $(SAN) $(LDFLAGS) -o $@ $^ $(CORE_LIBS)

$(BALANCERCTL): $(BUILD)/balancer/main/balancerctl.o $(BUILD)/balancer/config/size_parse.o \
		$(BUILD)/balancer/util/error.o
	$(CC) $(SAN) $(LDFLAGS) -o $@ $^ $(call pc_libs,json-c glib-2.0) -lm

$(LIBPOLICY): $(POLICY_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/tests/check_policies: $(BUILD)/tests/unit/check_policies.o $(LIBPOLICY)
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,$(CHECKPKG)) -lm

$(BUILD)/tests/check_split_trackers: $(BUILD)/tests/unit/check_split_trackers.o $(LIBPOLICY)
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,$(CHECKPKG)) -lm

$(BUILD)/tests/check_cold_lru: $(BUILD)/tests/unit/check_cold_lru.o $(LIBPOLICY)
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,$(CHECKPKG)) -lm

$(BUILD)/tests/check_need: $(BUILD)/tests/unit/check_need.o $(BUILD)/tests/unit/decision_trace.o $(LIBCORE) $(LIBPOLICY) $(LIBQMP)
	$(CC) $(SAN) -o $@ $^ $(CORE_LIBS) $(call pc_libs,$(CHECKPKG))

$(BUILD)/tests/check_fleet: $(BUILD)/tests/unit/check_fleet.o $(BUILD)/tests/unit/decision_trace.o $(LIBCORE) $(LIBPOLICY) $(LIBQMP)
	$(CC) $(SAN) -o $@ $^ $(CORE_LIBS) $(call pc_libs,$(CHECKPKG))

$(BUILD)/tests/check_agent: $(BUILD)/tests/unit/check_agent.o $(LIBCORE) $(LIBPOLICY) $(LIBQMP)
	$(CC) $(SAN) -o $@ $^ $(CORE_LIBS) $(call pc_libs,$(CHECKPKG))

$(BUILD)/tests/check_ledgers: $(BUILD)/tests/unit/check_ledgers.o $(LIBCORE) $(LIBPOLICY) $(LIBQMP)
	$(CC) $(SAN) -o $@ $^ $(CORE_LIBS) $(call pc_libs,$(CHECKPKG))

$(BUILD)/tests/check_balancer: $(BUILD)/tests/unit/check_balancer.o $(LIBCORE) $(LIBPOLICY) $(LIBQMP)
	$(CC) $(SAN) -o $@ $^ $(CORE_LIBS) $(call pc_libs,$(CHECKPKG))

$(BUILD)/tests/check_libvirt_xml: $(BUILD)/tests/unit/check_libvirt_xml.o $(BUILD)/balancer/hv/libvirt_xml.o \
		$(BUILD)/balancer/config/size_parse.o $(BUILD)/balancer/util/error.o
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,libxml-2.0 glib-2.0 $(CHECKPKG))

# (it runs tests/faults/fake_qemu, built beside it, for many QEMUs at once)
$(BUILD)/tests/check_backend_qmp: $(BUILD)/tests/unit/check_backend_qmp.o $(BUILD)/tests/unit/fake_qmp.o \
		$(LIBCORE) $(LIBQMP) | $(FAKE_QEMU)
	$(CC) $(SAN) -o $@ $(filter-out $(FAKE_QEMU),$^) $(CORE_LIBS) $(call pc_libs,$(CHECKPKG)) -lpthread

$(BUILD)/tests/check_qmp_framer: $(BUILD)/tests/unit/check_qmp_framer.o $(LIBQMP)
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,json-c glib-2.0 $(CHECKPKG))

$(BUILD)/tests/check_qmp_client: $(BUILD)/tests/unit/check_qmp_client.o \
		$(BUILD)/tests/unit/fake_qmp.o $(LIBQMP)
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,json-c glib-2.0 $(CHECKPKG)) -lpthread

$(BUILD)/tests/check_qemu_qmp: $(BUILD)/tests/integration/check_qemu_qmp.o \
		$(BUILD)/tests/integration/guest_vm.o $(BUILD)/tests/integration/cleanup.o $(LIBQMP)
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,json-c glib-2.0 $(CHECKPKG))

# Fuzz targets replayed over their corpus + regressions with gcc.
$(BUILD)/tests/replay_qmp_reader: $(BUILD)/tests/fuzz/fuzz_qmp_reader.o \
		$(BUILD)/tests/fuzz/replay_main.o $(LIBQMP)
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,json-c)
$(BUILD)/tests/replay_agent_line: $(BUILD)/tests/fuzz/fuzz_agent_line.o \
		$(BUILD)/tests/fuzz/replay_main.o $(BUILD)/balancer/agent/agent_proto.o \
		$(BUILD)/balancer/util/error.o $(LIBQMP)
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,json-c glib-2.0)
$(BUILD)/tests/replay_metadata_xml: $(BUILD)/tests/fuzz/fuzz_metadata_xml.o \
		$(BUILD)/tests/fuzz/replay_main.o $(BUILD)/balancer/config/metadata_xml.o \
		$(BUILD)/balancer/config/size_parse.o $(BUILD)/balancer/util/error.o $(BUILD)/policies/vm_policy.o
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,libxml-2.0 glib-2.0) -lm
$(BUILD)/tests/replay_libvirt_xml: $(BUILD)/tests/fuzz/fuzz_libvirt_xml.o \
		$(BUILD)/tests/fuzz/replay_main.o $(BUILD)/balancer/hv/libvirt_xml.o \
		$(BUILD)/balancer/config/size_parse.o $(BUILD)/balancer/util/error.o
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,libxml-2.0 glib-2.0)
$(BUILD)/tests/replay_config: $(BUILD)/tests/fuzz/fuzz_config.o \
		$(BUILD)/tests/fuzz/replay_main.o $(BUILD)/balancer/config/config.o \
		$(BUILD)/balancer/config/size_parse.o $(BUILD)/balancer/util/error.o $(LIBPOLICY)
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,glib-2.0) -lm
$(BUILD)/tests/replay_proc_text: $(BUILD)/tests/fuzz/fuzz_proc_text.o \
		$(BUILD)/tests/fuzz/replay_main.o $(BUILD)/balancer/reclaim/guest_ram.o \
		$(BUILD)/balancer/reclaim/qemu_memcg.o $(BUILD)/balancer/util/small_file.o $(BUILD)/balancer/util/error.o
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,glib-2.0)
$(BUILD)/tests/fuzz/%.o: tests/fuzz/%.c
	@mkdir -p $(dir $@)
	$(CC) -std=gnu11 -Wall -Wextra $(WERROR) $(CFLAGS) $(SAN) $(CPPFLAGS) $(call pc_cflags,json-c libxml-2.0 glib-2.0) -MMD -MP -c $< -o $@

$(BUILD)/tests/check_host_reclaim: $(BUILD)/tests/integration/check_host_reclaim.o \
		$(BUILD)/tests/integration/cleanup.o $(BUILD)/tests/integration/test_util.o $(LIBCORE) $(LIBPOLICY) $(LIBQMP)
	$(CC) $(SAN) -o $@ $^ $(CORE_LIBS) $(call pc_libs,$(CHECKPKG))

$(BUILD)/tests/check_faults: $(BUILD)/tests/faults/check_faults.o $(BUILD)/tests/integration/test_util.o \
		$(BUILD)/tests/integration/guest_vm.o $(BUILD)/tests/integration/cleanup.o
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,glib-2.0 $(CHECKPKG))
$(BUILD)/tests/faults/%.o: tests/faults/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests/integration $(call pc_cflags,glib-2.0 json-c $(CHECKPKG)) -MMD -MP -c $< -o $@
$(FAKE_QEMU): $(BUILD)/tests/faults/fake_qemu.o
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,json-c) -lm

$(BUILD)/tests/check_daemon: $(BUILD)/tests/integration/check_daemon.o $(BUILD)/tests/integration/test_util.o \
		$(BUILD)/tests/integration/guest_vm.o $(BUILD)/tests/integration/cleanup.o $(LIBCORE) $(LIBQMP)
	$(CC) $(SAN) -o $@ $^ $(call pc_libs,libvirt json-c glib-2.0 libsystemd $(CHECKPKG))

# ---- test guest ----
GUEST_DIR := build/guest
guest: $(GUEST_DIR)/.built
$(GUEST_DIR)/.built: tests/guest/build-guest.sh tests/guest/init $(wildcard tests/guest/workloads/*.[ch] tests/guest/workloads/*.sh)
	tests/guest/build-guest.sh $(GUEST_DIR)
	touch $@

# ---- tests ----
VALGRIND := valgrind -q --leak-check=full --show-leak-kinds=definite,indirect \
	    --errors-for-leak-kinds=definite,indirect --error-exitcode=99

# Every test program runs through tests/run-suite.sh, which adds its
# totals to $(RESULTS); `make check` ends with one "N passed, N failed" line.
RESULTS := $(BUILD)/test-results.txt
RUN     := tests/run-suite.sh $(RESULTS)

# Each suite runs even when one before it failed; the target fails at the end.
REPLAY_TARGETS := qmp_reader agent_line metadata_xml config proc_text libvirt_xml
# The tests that need neither root nor QEMU nor a network: the policies
# over hand-made snapshots and the need rules over simulated guests (what
# a package build runs: debian/rules' dh_auto_test).
POLICY_TESTS := $(BUILD)/tests/check_policies $(BUILD)/tests/check_split_trackers $(BUILD)/tests/check_need $(BUILD)/tests/check_fleet
unit-policy: $(POLICY_TESTS)
	@rc=0; for t in $(POLICY_TESTS); do echo "== $$t"; $(RUN) $$t || rc=1; done; exit $$rc

unit: $(UNIT_TESTS) $(REPLAYS)
	@rc=0; for t in $(UNIT_TESTS); do echo "== $$t"; $(RUN) $$t || rc=1; done; \
	  for r in $(REPLAY_TARGETS); do \
	    $(RUN) $(BUILD)/tests/replay_$$r $$(ls tests/fuzz/corpus/$$r/* tests/fuzz/regressions/$$r/* 2>/dev/null) || rc=1; \
	  done; \
	  $(RUN) tests/layers.sh || rc=1; \
	  $(RUN) tests/prometheus/check-rules.sh || rc=1; \
	  $(RUN) tests/docs-check.sh || rc=1; exit $$rc

valgrind: $(UNIT_TESTS) $(REPLAYS)
	@rc=0; for t in $(UNIT_TESTS); do echo "== valgrind $$t"; \
	  CK_FORK=no MEMBAL_ADVERSARY_SEEDS=10 FLEET_SEEDS=100 MEMBAL_MANY_QMP=100 $(RUN) $(VALGRIND) $$t || rc=1; done; \
	  for r in $(REPLAY_TARGETS); do \
	    $(RUN) $(VALGRIND) $(BUILD)/tests/replay_$$r \
	      $$(ls tests/fuzz/corpus/$$r/* tests/fuzz/regressions/$$r/* 2>/dev/null) || rc=1; \
	  done; exit $$rc

# balancerd runs under valgrind in the end-to-end tests (not under ASan)
DAEMON_WRAPPER ?= $(if $(SAN),,$(VALGRIND))
integration: $(INTEG_TESTS) $(BALANCERD) $(BALANCERCTL) $(FAKE_QEMU) guest
	@failed=0; for t in $(INTEG_TESTS); do echo "== $$t"; \
	  rc=0; MEMBAL_GUEST_DIR=$(CURDIR)/$(GUEST_DIR) MEMBAL_TOP=$(CURDIR) \
	    MEMBAL_DAEMON_WRAPPER="$(DAEMON_WRAPPER)" $(RUN) $$t || rc=$$?; \
	  if [ $$rc -eq 77 ]; then echo "== $$t SKIPPED"; elif [ $$rc -ne 0 ]; then failed=1; fi; done; \
	  echo "== tests/prometheus/scrape.sh"; rc=0; $(RUN) tests/prometheus/scrape.sh --build $(BUILD) || rc=$$?; \
	  if [ $$rc -ne 0 ] && [ $$rc -ne 77 ]; then failed=1; fi; \
	  exit $$failed

# Every suite runs even when an earlier one failed; the last line is
# "check: N passed, N failed, N skipped", each skip listed with its reason.
check: all
	@mkdir -p $(BUILD)
	@tests/check-all.sh $(RESULTS) "$(MAKE) --no-print-directory" unit valgrind integration deb-check \
	  soak-smoke bench-smoke fuzz-smoke

# Soak (tests/faults/soak.sh): 50 fake QMP guests + 1 real one at a 1 s
# tick; RSS and fds must stay flat.  make soak: 10 minutes; make check: 40 s.
SOAK_SECONDS ?= 600
soak: $(BALANCERD) $(BALANCERCTL) $(FAKE_QEMU) guest
	tests/faults/soak.sh --seconds $(SOAK_SECONDS) --build $(BUILD)
soak-smoke: $(BALANCERD) $(BALANCERCTL) $(FAKE_QEMU) guest
	$(RUN) tests/faults/soak.sh --seconds 40 --build $(BUILD)

# The benchmark (bench/bench.py, scenarios in bench/scenarios.py): `make
# bench` runs every scenario x configuration 3 times (under 2 hours under
# TCG on 2 cores) and fails when a gate is missed; SCENARIO=, CONFIGS= and
# RUNS= pick a subset (`make bench SCENARIO=seed CONFIGS="none split-lru"`).
# The smoke runs one short round of two scenarios with none and split-lru
# in `make check`, so the harness cannot rot.
SCENARIO ?=
CONFIGS  ?=
RUNS     ?= 3
bench: $(BALANCERD) $(SIM) guest
	$(SIM)
	bench/bench.py --scenario "$(SCENARIO)" --configs "$(CONFIGS)" --runs $(RUNS)
$(SIM): $(BUILD)/bench/sim/sim.o $(LIBPOLICY)
	$(CC) $(SAN) -o $@ $^ -lm
sim: $(SIM)
	$(SIM)
# balancerd's own cost with many guests (fake QMP guests, or libvirt's test
# driver behind a libvirtd of its own; 1 s tick): SCALE_GUESTS may be a list
bench-scale: $(BALANCERD) $(BALANCERCTL) $(FAKE_QEMU) $(BALLOON_SHIM)
	@rc=0; for n in $(SCALE_GUESTS); do \
	  bench/scale.sh --backend $(SCALE_BACKEND) --guests $$n --seconds $(SCALE_SECONDS) --runs $(RUNS) || rc=1; \
	done; exit $$rc
SCALE_GUESTS  ?= 200
SCALE_BACKEND ?= qmp
SCALE_SECONDS ?= 60
$(BALLOON_SHIM): bench/scale/balloon_shim.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -fPIC -shared $(call pc_cflags,libvirt glib-2.0) -o $@ $< $(call pc_libs,libvirt glib-2.0) -ldl -lm
# host reclaim's scan cost on a synthetic guest, this checkout against SCAN_REVS
bench-scan: $(LIBCORE) $(LIBPOLICY) $(LIBQMP)
	bench/scan_cost/run.sh --revs "$(SCAN_REVS)" --runs $(RUNS) --gib $(SCAN_GIB)
SCAN_REVS ?= 27af2fb work
SCAN_GIB  ?= 16
# what a guest's touch costs the host after a balloon pulse, against 2 MiB
# discards (free page reporting) and resident memory, FAULT_MIB at a time;
# and FAULT_AGE seconds after a 2 MiB discard (a nested host's own reporting)
FAULT_COST := $(BUILD)/bench/membal-fault-cost
bench-fault: $(FAULT_COST)
	$(FAULT_COST) --mib $(FAULT_MIB) --runs $(FAULT_RUNS) --age $(FAULT_AGE)
FAULT_MIB  ?= 300
FAULT_RUNS ?= 5
FAULT_AGE  ?= 5
FAULT_COST_SRC := bench/fault_cost/fault_cost.c balancer/host/own_reporting.c balancer/util/small_file.c
$(FAULT_COST): $(FAULT_COST_SRC) balancer/host/own_reporting.h balancer/util/small_file.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(call pc_cflags,glib-2.0) -o $@ $(FAULT_COST_SRC) $(call pc_libs,glib-2.0)
bench-smoke: $(BALANCERD) guest
	$(RUN) bench/bench.py --smoke --out build/bench-smoke
# balloon against virtio-mem on the same guest: speed, host memory, huge pages
bench-vmem: guest
	bench/vmem_speed.py --runs $(RUNS) --out build/bench-vmem

asan:
	@mkdir -p build-asan; rm -f build-asan/test-results.txt
	$(MAKE) BUILD=build-asan SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" OPT=-O1 unit integration
	@tests/summary.sh build-asan/test-results.txt

# ---- fuzzing (clang + libFuzzer) ----
# make check fuzzes every parser for FUZZ_SMOKE_SECONDS each (CI time box);
# a crash fails the run and leaves its input in $(BUILD)/fuzz/ for
# tests/fuzz/regressions/.
FUZZ_SMOKE_SECONDS ?= 8
fuzz-smoke:
	$(RUN) $(MAKE) --no-print-directory fuzz FUZZ_SECONDS=$(FUZZ_SMOKE_SECONDS)
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := $(BUILD)/fuzz/fuzz_qmp_reader $(BUILD)/fuzz/fuzz_agent_line \
                $(BUILD)/fuzz/fuzz_metadata_xml $(BUILD)/fuzz/fuzz_config \
                $(BUILD)/fuzz/fuzz_proc_text $(BUILD)/fuzz/fuzz_libvirt_xml
# the fuzzers build straight from sources: rebuild them when a header changes
FUZZ_HDRS    := $(wildcard qmp/*.h balancer/*/*.h policies/*.h)
$(FUZZ_TARGETS): $(FUZZ_HDRS)
$(BUILD)/fuzz/fuzz_proc_text: tests/fuzz/fuzz_proc_text.c balancer/reclaim/guest_ram.c \
		balancer/reclaim/qemu_memcg.c balancer/util/small_file.c balancer/util/error.c
	@mkdir -p $(dir $@)
	clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined $(CPPFLAGS) $(call pc_cflags,glib-2.0) \
	  -o $@ $(filter %.c,$^) $(call pc_libs,glib-2.0)
$(BUILD)/fuzz/fuzz_qmp_reader: tests/fuzz/fuzz_qmp_reader.c $(QMP_SRC)
	@mkdir -p $(dir $@)
	clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined $(CPPFLAGS) \
	  $(call pc_cflags,json-c) -o $@ $(filter %.c,$^) $(call pc_libs,json-c)

$(BUILD)/fuzz/fuzz_agent_line: tests/fuzz/fuzz_agent_line.c balancer/agent/agent_proto.c qmp/qmp_framer.c \
		balancer/util/error.c
	@mkdir -p $(dir $@)
	clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined $(CPPFLAGS) \
	  $(call pc_cflags,json-c glib-2.0) -o $@ $(filter %.c,$^) $(call pc_libs,json-c glib-2.0) -lm

$(BUILD)/fuzz/fuzz_metadata_xml: tests/fuzz/fuzz_metadata_xml.c balancer/config/metadata_xml.c \
		balancer/config/size_parse.c policies/vm_policy.c balancer/util/error.c
	@mkdir -p $(dir $@)
	clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined $(CPPFLAGS) \
	  $(call pc_cflags,libxml-2.0 glib-2.0) -o $@ $(filter %.c,$^) $(call pc_libs,libxml-2.0 glib-2.0) -lm

$(BUILD)/fuzz/fuzz_libvirt_xml: tests/fuzz/fuzz_libvirt_xml.c balancer/hv/libvirt_xml.c \
		balancer/config/size_parse.c balancer/util/error.c
	@mkdir -p $(dir $@)
	clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined $(CPPFLAGS) \
	  $(call pc_cflags,libxml-2.0 glib-2.0) -o $@ $(filter %.c,$^) $(call pc_libs,libxml-2.0 glib-2.0)

$(BUILD)/fuzz/fuzz_config: tests/fuzz/fuzz_config.c balancer/config/config.c balancer/config/size_parse.c \
		balancer/util/error.c $(POLICY_SRC)
	@mkdir -p $(dir $@)
	clang -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined $(CPPFLAGS) \
	  $(call pc_cflags,glib-2.0) -o $@ $(filter %.c,$^) $(call pc_libs,glib-2.0) -lm

fuzz: $(FUZZ_TARGETS)
	@set -e; for t in $(FUZZ_TARGETS); do n=$$(basename $$t); \
	  mkdir -p $(BUILD)/fuzz/corpus-$$n; \
	  echo "== $$n for $(FUZZ_SECONDS)s"; \
	  $$t -max_total_time=$(FUZZ_SECONDS) -max_len=8192 -artifact_prefix=$(BUILD)/fuzz/$$n- \
	    $(BUILD)/fuzz/corpus-$$n tests/fuzz/corpus/$${n#fuzz_}; done

# ---- dependencies (Debian 12) ----
DEB_PKGS := build-essential pkg-config clang libclang-rt-14-dev valgrind \
  libjson-c-dev libglib2.0-dev libvirt-dev libvirt-glib-1.0-dev libxml2-dev \
  libmicrohttpd-dev libsystemd-dev check \
  qemu-system-x86 qemu-utils linux-image-amd64 busybox-static cpio xz-utils zstd kmod \
  libvirt-daemon-system libvirt-daemon-driver-qemu libvirt-clients curl procps iproute2 \
  prometheus gnuplot-nox python3 python3-pyroute2 bash-completion groff-base \
  debhelper dpkg-dev fakeroot lintian

deps:
	apt-get update
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(DEB_PKGS)
# `make bench`'s PostgreSQL scenarios: the server the guest runs is the
# host's package (tests/guest/build-pgdisk.sh copies it onto the guest's disk)
BENCH_PKGS := postgresql-15 e2fsprogs
bench-deps:
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(BENCH_PKGS)

PREFIX  ?= /usr
# where this system's systemd reads unit files (/lib/systemd/system on
# Debian 12, /usr/lib/systemd/system once /usr is merged in dpkg's view)
SYSTEMD_UNITDIR ?= $(or $(shell pkg-config --variable=systemdsystemunitdir systemd 2>/dev/null),/lib/systemd/system)
DESTDIR ?=
install: $(BALANCERD) $(BALANCERCTL)
	install -D -m 0755 $(BALANCERD) $(DESTDIR)$(PREFIX)/sbin/balancerd
	install -D -m 0755 $(BALANCERCTL) $(DESTDIR)$(PREFIX)/sbin/balancerctl
	install -D -m 0644 balancer.service $(DESTDIR)$(SYSTEMD_UNITDIR)/balancer.service
	install -D -m 0644 balancerd.8 $(DESTDIR)$(PREFIX)/share/man/man8/balancerd.8
	install -D -m 0644 balancerctl.8 $(DESTDIR)$(PREFIX)/share/man/man8/balancerctl.8
	install -D -m 0644 contrib/bash-completion/balancerctl $(DESTDIR)$(PREFIX)/share/bash-completion/completions/balancerctl
	install -D -m 0644 contrib/prometheus/membal-rules.yml $(DESTDIR)$(PREFIX)/share/membal/prometheus/membal-rules.yml
	install -D -m 0644 contrib/grafana/membal-dashboard.json $(DESTDIR)$(PREFIX)/share/membal/grafana/membal-dashboard.json
	install -D -m 0644 contrib/systemd/host-reclaim.conf $(DESTDIR)$(PREFIX)/share/doc/membal/examples/host-reclaim.conf
	[ -e $(DESTDIR)/etc/balancer/balancer.conf ] || \
	  install -D -m 0644 balancer.conf $(DESTDIR)/etc/balancer/balancer.conf

# ---- Debian packages (debian/): membal and membal-agent into $(BUILD)/deb ----
deb:
	dpkg-checkbuilddeps
	rm -rf $(BUILD)/deb && mkdir -p $(BUILD)/deb
	debian/rules clean
	debian/rules build
	fakeroot debian/rules binary DEB_DESTDIR=$(abspath $(BUILD)/deb)
	debian/rules clean
	lintian --fail-on error $(BUILD)/deb/*.deb
	@ls -l $(BUILD)/deb
# build, lint, install, look, purge (root; tests/deb-check.sh)
deb-check: deb
	$(RUN) tests/deb-check.sh $(BUILD)/deb || [ $$? -eq 77 ]

clean:
	rm -rf build build-asan build-deb

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
