# punctual — the one entry point. `make test` and `make run` work on a fresh clone: every
# tool they need is installed here, into ./.venv (Python) and ./target (Rust).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3
VENV := .venv
VENV_STAMP := $(VENV)/.installed
# dynalite (npm, Apache-2.0): the local DynamoDB that isolates concurrent conditional writes
# (moto's do not), pinned by tools/dynalite/package-lock.json, installed with npm ci.
DYNALITE := .tools/dynalite/node_modules/dynalite/package.json
CARGO ?= cargo

.PHONY: bench-ingest bench-run fidelity fidelity-fast cold-start check-seeds soak drill drill-fast help test run build deploy stack-policy localstack-test bench-limiter invoke-smoke fmt-check clippy core-deps test-all lint-template tools build-tools clean localstack e2e

help:
	@echo "make test   fmt, clippy, unit + handler + adapter + integration tests against moto, template lint"
	@echo "make run    the whole pipeline on this machine against the emulator, with a final report"
	@echo "make build  four Lambda packages (cargo-lambda);  make deploy  sam deploy --guided, then the stack policy"
	@echo "make bench-limiter   the shared limiter's frontier;  make localstack-test  suite on LocalStack"
	@echo "make bench-run  release punctual run at the quota, recorded in target/bench-run.json and compared"
	@echo "make soak   the fault checker over 10,000 seeds (make test runs 300)"
	@echo "make drill  the template's alarms against every incident and 24 normal days (make test runs a subset)"
	@echo "make e2e    infra/template.yaml deployed on LocalStack (host mode, no Docker) and exercised end to end (in make test)"

## tools: a pinned Python venv with moto server and cfn-lint, and dynalite from npm.
tools: $(VENV_STAMP) $(DYNALITE)

$(DYNALITE): tools/dynalite/package.json tools/dynalite/package-lock.json tools/dynalite/patch-index-keys.js
	@command -v npm >/dev/null || { echo "npm (Node.js) is needed for dynalite, the local DynamoDB" >&2; exit 1; }
	@echo "==> installing dynalite (tools/dynalite/package-lock.json) into .tools/dynalite"
	rm -rf .tools/dynalite && mkdir -p .tools/dynalite
	cp tools/dynalite/package.json tools/dynalite/package-lock.json .tools/dynalite/
	cd .tools/dynalite && npm ci --no-audit --no-fund --silent
	@# index entries unique per item (tools/dynalite/patch-index-keys.js says why)
	node tools/dynalite/patch-index-keys.js .tools/dynalite/node_modules/dynalite
	@touch $@

$(VENV_STAMP): tools/requirements.txt tools/moto/pyproject.toml tools/moto/punctual_moto/__init__.py
	@echo "==> creating $(VENV) with $$($(PYTHON) --version)"
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r tools/requirements.txt
	@# punctual-moto: moto server with SQS requests in constant time and kept connections (tools/moto says why)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps ./tools/moto
	rm -rf tools/moto/build tools/moto/*.egg-info
	@touch $@

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --locked -- -D warnings

## The core must build without the AWS SDK, Lambda or HTTP (docs/design.md#crate-layout): keeps the
## dependency direction honest and `cargo test -p punctual-core` fast. The in-memory fakes
## (punctual-core feature `testing`) and tokio's paused clock (`test-util`) stay dev-side: the
## operator CLI links neither, not even through its tests, and no function, operator or harness
## crate has them as a normal dependency or calls `testing::` outside its tests.
FAKE_FEATURES := punctual-core feature "testing"|tokio feature "test-util"
core-deps:
	@if $(CARGO) tree -p punctual-core -e normal --locked | grep -E 'aws-|lambda|reqwest|hyper'; then \
	  echo "punctual-core must not depend on the crates above" >&2; exit 1; fi
	@echo "==> punctual-core depends on no AWS, Lambda or HTTP crate"
	@if $(CARGO) tree -p punctual -e features --locked | grep -E '$(FAKE_FEATURES)'; then \
	  echo "the operator CLI (punctual) must not link the fakes or tokio test-util" >&2; exit 1; fi
	@for p in punctual-sender punctual-scheduler punctual-redrive punctual-ingest punctual-ops punctual-harness; do \
	  if $(CARGO) tree -p $$p -e features,no-dev --locked | grep -E '$(FAKE_FEATURES)'; then \
	    echo "$$p must not depend on the fakes or tokio test-util" >&2; exit 1; fi; done
	@if grep -rn 'testing::' crates/cli/src crates/ops/src crates/harness/src crates/sender/src/main.rs \
	    crates/sender/src/app.rs crates/sender/src/config.rs crates/scheduler/src/main.rs crates/scheduler/src/app.rs \
	    crates/redrive/src/main.rs crates/redrive/src/app.rs crates/ingest/src; then \
	  echo "production code must not call the test fixtures" >&2; exit 1; fi
	@echo "==> the operator CLI, the functions and the harness link no fakes"
	@if grep -rnE 'scan_all|\.scan\(\)' crates/ops/src crates/cli/src; then \
	  echo "operator commands must not scan a table (punctual status reads indexes; docs/commands.md#punctual-status)" >&2; exit 1; fi
	@echo "==> no operator command scans a table"

## The whole suite (unit, handler, adapter, integration) with AWS_ENDPOINT_URL pointing at
## moto server started on a free loopback port (or at the endpoint already set), and dynalite
## beside it. cargo-nextest (part of this project's machines) runs each test in its own process,
## two at a time, the pipeline tests one at a time (.config/nextest.toml), and reports every
## failure; doctests then run with cargo test. Without cargo-nextest, plain cargo test runs all.
NEXTEST := $(shell $(CARGO) nextest --version >/dev/null 2>&1 && echo yes)
test-all: tools
ifeq ($(NEXTEST),yes)
	tools/with-emulator.sh $(CARGO) nextest run --workspace --locked --no-tests=warn
	$(CARGO) test --workspace --locked --doc
else
	@echo "==> cargo-nextest not found: the suite runs with cargo test"
	tools/with-emulator.sh $(CARGO) test --workspace --locked
endif

## The SAM template: cfn-lint (schema, SAM transform, best practices), then the design's
## invariants cfn-lint cannot know (tools/check_template.py), then docs/configuration.md against
## the code's environment reads and the template's parameters (tools/check_config_docs.py), then
## every relative link and anchor of the Markdown pages, every docs/ reference in the code, and
## each alarm's runbook section in docs/operations.md (tools/check_links.py); then the checks of
## the tools themselves (fidelity.py must fail on a disagreement; config_digest.py must change
## with every parameter, default and binary; punctual-moto must keep a
## message sent during a delete; dynalite's index must return every item with a key).
lint-template: tools
	$(VENV)/bin/cfn-lint infra/template.yaml
	$(VENV)/bin/python tools/check_template.py infra/template.yaml
	$(VENV)/bin/python tools/check_config_docs.py
	$(VENV)/bin/python tools/check_links.py
	$(VENV)/bin/python tools/test_fidelity.py
	$(VENV)/bin/python tools/test_config_digest.py
	$(VENV)/bin/python tools/moto/test_punctual_moto.py
	$(VENV)/bin/python tools/dynalite/test_index_keys.py

## The debug checks after the suite (check-seeds, drill-fast, fidelity-fast) run the binaries of
## the suite's own build: `--workspace --bins --tests` unifies the features the tests enable, so
## after test-all it compiles nothing. `cargo run -p punctual-sim` alone (and `cargo build -p
## punctual -p punctual-sim`) resolves other feature sets and rebuilt most of the workspace
## twice: 74 s and 151 s of a 1,099 s fresh-clone `make test` (2026-12-03).
SUITE_BUILD := $(CARGO) build --locked -q --workspace --bins --tests
DEBUG_BIN = $${CARGO_TARGET_DIR:-target}/debug

## The fault checker (docs/design.md#invariants-the-fault-checker-asserts): seeded fault plans through the real
## services in virtual time, invariants I1–I8 after every seed; exits 3 on a violation with the seed to replay.
## `make test` runs CHECK_SEEDS seeds (≈10 s); `make soak` runs 10,000 in release.
CHECK_SEEDS ?= 300
check-seeds:
	$(SUITE_BUILD)
	$(DEBUG_BIN)/punctual-sim check --seeds $(CHECK_SEEDS)

## The soak also runs a larger world: 1,000 reminders and 10 sender instances per seed over
## 1,000 seeds (the default world is 40 and 3: contention the small one cannot make).
soak:
	$(CARGO) run --locked --release -q -p punctual-sim -- check --seeds 10000 $(SOAK_ARGS)
	$(CARGO) run --locked --release -q -p punctual-sim -- check --seeds 1000 --reminders 1000 --senders 10 $(SOAK_ARGS)

## The template's alarms proven against incidents (docs/measurements.md#the-alarms-drilled): each incident
## of the runbook through the simulator, infra/template.yaml's own alarms evaluated with
## CloudWatch's semantics; exit 3 when an incident pages late or a normal day pages. `make test`
## runs DRILL_FAST (18 incidents, 6 normal days, ≈ 40 s); `make drill` all 25 and 24 days.
DRILL_FAST := --incident credentials_revoked,operator_pause_left_on,provider_outage,scheduler_not_invoked,lane_not_polled,urgent_lane_not_polled,provider_quota_cut,ledger_refusing,sender_crash_loop,dlq_second_wave,overload,redrive_during_traffic,sms_outage_email_unaffected,sms_credentials_revoked,sms_overload,sms_queue_not_polled,sms_urgent_lane_not_polled,ingest_stalled --mornings 6
drill-fast:
	$(SUITE_BUILD)
	$(DEBUG_BIN)/punctual-sim drill $(DRILL_FAST)

drill:
	$(CARGO) run --locked --release -q -p punctual-sim -- drill $(DRILL_ARGS)

## The simulator against the real pipeline on one workload (docs/measurements.md#the-simulator-against-the-real-pipeline):
## `punctual run` with its requests counted below the SDK, and `simulate --workload run` with
## the same flags, compared per message within 10 %; a difference is fixed or named with its
## reason in tools/fidelity.py. `make test` runs 500 reminders (≈ 15 s); `make fidelity` its suite:
## 3,000 (10 % tight), 10,000, and 3,000 while 500 dead letters are redriven (`--redrive`).
FIDELITY_ARGS ?= --suite
fidelity-fast: tools
	$(SUITE_BUILD)
	$(VENV)/bin/python tools/fidelity.py --reminders 500 --json target/fidelity.json

fidelity: tools
	$(CARGO) build --locked -q -p punctual -p punctual-sim
	$(VENV)/bin/python tools/fidelity.py $(FIDELITY_ARGS) --json target/fidelity.json

## LocalStack's venv (≈ 70 s of downloads and unpacking, once) is installed in the background
## while the Rust checks compile and run, and waited for before e2e: a fresh clone saves the
## minute. Its output goes to target/localstack-install.log, shown if it fails.
## The drill (one core, ≈ 30 s, virtual time: nothing in it is timed) runs beside e2e, which
## mostly waits on LocalStack; the timed checks (fidelity-fast compares deliveries per second)
## run alone before them. A fresh clone took 955–968 s with the drill in line (2026-12-03).
## Every cargo step of the suite builds without incremental compilation (a fresh build gains
## nothing from it and pays for its bookkeeping).
export CARGO_INCREMENTAL := 0
TEST_CHECKS := fmt-check clippy core-deps test-all check-seeds fidelity-fast lint-template
test:
	@mkdir -p target
	@echo "==> installing LocalStack in the background (target/localstack-install.log)"
	@$(MAKE) --no-print-directory localstack >target/localstack-install.log 2>&1 & ls=$$!; \
	trap 'kill $$ls 2>/dev/null || true' EXIT; \
	$(MAKE) --no-print-directory $(TEST_CHECKS); \
	if ! wait $$ls; then \
	  echo "make: installing LocalStack failed; the end of target/localstack-install.log:" >&2; \
	  tail -n 30 target/localstack-install.log >&2; exit 1; fi; \
	echo "==> drill-fast beside e2e (target/drill-fast.log)"; \
	$(MAKE) --no-print-directory drill-fast >target/drill-fast.log 2>&1 & drill=$$!; \
	trap 'kill $$drill 2>/dev/null || true' EXIT; \
	$(MAKE) --no-print-directory e2e; \
	if wait $$drill; then tail -n 20 target/drill-fast.log; else \
	  echo "make: drill-fast failed; target/drill-fast.log:" >&2; cat target/drill-fast.log >&2; exit 1; fi; \
	trap - EXIT
	@echo "==> make test: all checks passed"

## The whole pipeline on this machine (debug build, shared with `make test`; add
## PROFILE=release for full speed). RUN_ARGS passes flags: make run RUN_ARGS="--reminders 10000".
PROFILE ?= dev
RUN_ARGS ?=
run: tools
	$(CARGO) run --locked --profile $(PROFILE) -p punctual -- run $(RUN_ARGS)

## LocalStack for `make e2e`, in its own venv: localstack-core[runtime] 2026.3.0, pinned — the
## community edition's last release (its repository is archived upstream: it will not move,
## and it will get no fixes). It needs Python >= 3.12 (3.11 fails on its syntax although its
## metadata says 3.10): the newest 3.13.x, else 3.12.x, under $(PYENV_VERSIONS), or
## LOCALSTACK_PYTHON=/path/to/python. Its dependencies are held to LocalStack's own runtime lock
## of that release (tools/localstack/constraints.txt; unpinned, pip picks versions that break its
## start-up). ≈ 70 s and ≈ 510 MB once. Then the two plugins of tools/localstack/ (a Lambda
## runtime executor running each function's bootstrap as a host process, and a DynamoDB
## provider backed by moto), reinstalled when their sources change.
LOCALSTACK_VENV := .venv-localstack
LOCALSTACK_STAMP := $(LOCALSTACK_VENV)/.installed
LOCALSTACK_PLUGINS_STAMP := $(LOCALSTACK_VENV)/.installed-plugins
LOCALSTACK_PIN := localstack-core[runtime]==2026.3.0
PYENV_VERSIONS ?= $(HOME)/.pyenv/versions
LOCALSTACK_PYTHON ?= $(shell for v in 3.13 3.12; do ls -d $(PYENV_VERSIONS)/$$v.[0-9]*/bin/python 2>/dev/null | sort -V | tail -1; done | head -1)
localstack: $(LOCALSTACK_PLUGINS_STAMP)

$(LOCALSTACK_STAMP): tools/localstack/constraints.txt
	@if [ -z "$(LOCALSTACK_PYTHON)" ]; then \
	  echo "make: LocalStack 2026.3.0 needs Python >= 3.12 and none was found: looked for $(PYENV_VERSIONS)/3.13.*/bin/python, then $(PYENV_VERSIONS)/3.12.*/bin/python (pyenv install 3.13, or set LOCALSTACK_PYTHON=/path/to/python3.12+)" >&2; exit 1; fi
	@$(LOCALSTACK_PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else "make: LOCALSTACK_PYTHON=$(LOCALSTACK_PYTHON) is Python " + sys.version.split()[0] + "; LocalStack 2026.3.0 needs >= 3.12")'
	@echo "==> creating $(LOCALSTACK_VENV) with $$($(LOCALSTACK_PYTHON) --version) and $(LOCALSTACK_PIN)"
	rm -rf $(LOCALSTACK_VENV)
	$(LOCALSTACK_PYTHON) -m venv $(LOCALSTACK_VENV)
	$(LOCALSTACK_VENV)/bin/python -m pip install --quiet --disable-pip-version-check "$(LOCALSTACK_PIN)" -c tools/localstack/constraints.txt
	@touch $@

$(LOCALSTACK_PLUGINS_STAMP): $(LOCALSTACK_STAMP) tools/localstack/pyproject.toml $(wildcard tools/localstack/punctual_localstack/*.py)
	$(LOCALSTACK_VENV)/bin/python -m pip install --quiet --disable-pip-version-check --no-deps ./tools/localstack
	rm -rf tools/localstack/build tools/localstack/*.egg-info
	@touch $@

## The deployed stack, end to end, on LocalStack (tools/e2e.py says what it checks, what
## LocalStack cannot do, and what it does instead): LocalStack on a free loopback port, the
## four functions' debug builds packaged and deployed with infra/template.yaml through
## CloudFormation + the SAM transform, then the EventBridge rule's tick, every queue's event
## source mapping (through the aliases live), the DLQ and its alarm, `punctual redrive
## --function`, `status` and `reconcile` against the stack, the producer's path, and two stack
## updates (the sms channel off and on again). ≈ 4 minutes (the rule ticks once a minute); everything it
## starts is stopped on every exit, Ctrl-C and SIGTERM included. Logs under target/e2e/.
e2e: localstack
	CARGO="$(CARGO)" $(LOCALSTACK_VENV)/bin/python tools/e2e.py

## Lambda packages: one `bootstrap` per function under target/lambda/<fn>/, via cargo-lambda
## (pinned, from PyPI, with zig as the cross linker). ARCH=arm64 needs the aarch64 target.
ARCH ?= x86_64
BUILD_STAMP := $(VENV)/.installed-build
build-tools: $(BUILD_STAMP)
$(BUILD_STAMP): tools/requirements-build.txt $(VENV_STAMP)
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r tools/requirements-build.txt
	@touch $@

# AWS-LC's CPU jitter entropy costs up to ~1 s per cold start (lambda_runtime README); build-time only, so every Lambda build sets it.
LAMBDA_BUILD_ENV := AWS_LC_SYS_NO_JITTER_ENTROPY=1
build: build-tools
	$(LAMBDA_BUILD_ENV) PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(VENV)/bin/cargo-lambda lambda build --release --locked \
	  $(if $(filter arm64,$(ARCH)),--arm64,--x86-64) --bin sender --bin scheduler --bin redrive --bin ingest
	@ls -l target/lambda/*/bootstrap

## Each package from `make build` started under the Lambda runtime API emulator with its real
## environment against the local pipeline: init (exec → first GET next), the first
## invocation's duration, binary sizes (target/cold-start.json). Needs `make build` first.
cold-start: tools
	tools/with-emulator.sh tools/cold-start.sh

## The real function binary under the Lambda runtime API with an event from events/:
##   cargo run -p punctual -- local up; make invoke-sender EVENT=events/sender/due.json
invoke-%: build-tools
	tools/invoke.sh $* $(EVENT)

## One smoke invocation: the sender binary, as Lambda runs it, quarantines a malformed message
## and answers with an empty batch-failure list; the redrive binary through lambda:Invoke.
## Not in `make test` since `make e2e` checks the same with the deployed stack.
invoke-smoke: build-tools
	tools/with-emulator.sh tools/invoke-smoke.sh

## Deploy to AWS with SAM: builds the three packages with cargo-lambda and asks for the stack
## name, region and parameters (saved to infra/samconfig.toml), then sets the stack policy
## (stack-policy, below). Needs AWS credentials; SAM CLI is installed into the venv on first use
## (it is not needed for tests).
## ARCH (x86_64 | arm64) is the one place the architecture is chosen, e.g. `make deploy
## ARCH=arm64`: `sam build` gets it as the template's Architecture parameter, which SAM's
## rust-cargolambda builder turns into `cargo lambda build --arm64` (or its x86_64 default);
## the built bootstraps are then checked to be ELF for that machine; and `sam deploy` gets the
## same Architecture, so the functions are created for the binaries that were built. A mismatch
## fails here, before anything is deployed, instead of at every cold start.
## `sam deploy` replaces (does not merge) the saved parameter_overrides when any are given on
## the command line (aws-sam-cli#2380), so the saved ones are read from infra/samconfig.toml and
## passed back with Architecture=$(ARCH) put in place: the guided prompts keep defaulting to the
## saved answers (a tuned ProviderRatePerSecond is not reset by pressing Enter). Keep the
## Architecture answer at its default. DEPLOY_FLAGS=--no-confirm-changeset (without --guided)
## deploys the saved answers unattended.
SAM_CLI := aws-sam-cli==1.150.0
DEPLOY_FLAGS ?= --guided
SAM := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" sam
# Every saved parameter override but Architecture and ConfigDigest, then Architecture=$(ARCH), as SAM parses them.
SAVED_OVERRIDES := import os, sys, shlex, tomllib; \
  p = "infra/samconfig.toml"; \
  c = tomllib.load(open(p, "rb")) if os.path.exists(p) else {}; \
  s = c.get("default", {}).get("deploy", {}).get("parameters", {}).get("parameter_overrides", ""); \
  kv = [i.split("=", 1) for i in (shlex.split(s) if isinstance(s, str) else [w for x in s for w in shlex.split(x)]) if "=" in i]; \
  kv = [(k, v) for k, v in kv if k not in ("Architecture", "ConfigDigest")] + [("Architecture", sys.argv[1])]; \
  print(" ".join(k + "=" + chr(34) + v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34)) + chr(34) for k, v in kv))
# ELF e_machine of each built bootstrap: 62 = x86-64, 183 = AArch64.
CHECK_ARCH := import sys; \
  want = {"x86_64": 62, "arm64": 183}[sys.argv[1]]; \
  heads = {p: open(p, "rb").read(20) for p in sys.argv[2:]}; \
  bad = [p for p, h in heads.items() if h[:4] != bytes([127, 69, 76, 70]) or int.from_bytes(h[18:20], "little") != want]; \
  sys.exit("built for the wrong architecture (want " + sys.argv[1] + "; an old build in infra/.aws-sam? rm -rf it): " + ", ".join(bad) if bad else 0)
# The sender's, scheduler's and ingest's `live` aliases take a deploy's settings only through a
# new version, which SAM publishes when ConfigDigest changes (tools/config_digest.py: their
# resources, the parameters they read, their binaries). The digest must be of the answers that
# are deployed, so --guided runs in two steps: the prompts, saved, with a change set left
# unexecuted; then the deploy of the saved answers with their digest, its change set confirmed
# as samconfig.toml says (answer Y to saving the arguments, or the prompts' changes are lost).
DIGEST := $(VENV)/bin/python tools/config_digest.py infra/template.yaml
BUILT_BOOTSTRAPS := infra/.aws-sam/build/SenderFunction/bootstrap infra/.aws-sam/build/SchedulerFunction/bootstrap infra/.aws-sam/build/IngestFunction/bootstrap
deploy: build-tools
	@case "$(ARCH)" in x86_64|arm64) ;; *) echo "ARCH must be x86_64 or arm64, not '$(ARCH)'" >&2; exit 2;; esac
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(SAM_CLI)
	cd infra && $(LAMBDA_BUILD_ENV) $(SAM) build --beta-features --parameter-overrides Architecture=$(ARCH)
	$(VENV)/bin/python -c '$(CHECK_ARCH)' $(ARCH) infra/.aws-sam/build/{Sender,Scheduler,Redrive,Ingest}Function/bootstrap
	@echo "==> deploying with Architecture=$(ARCH) (binaries checked); keep that answer if prompted"
	overrides=$$($(VENV)/bin/python -c '$(SAVED_OVERRIDES)' $(ARCH)) && \
	  if [ -n "$(filter --guided,$(DEPLOY_FLAGS))" ]; then \
	    echo "==> the guided answers first (saved to infra/samconfig.toml; its change set is not executed), then the deploy with their ConfigDigest"; \
	    (cd infra && $(SAM) deploy $(DEPLOY_FLAGS) --no-execute-changeset --parameter-overrides "$$overrides") || exit $$?; \
	    overrides=$$($(VENV)/bin/python -c '$(SAVED_OVERRIDES)' $(ARCH)); \
	  fi && \
	  digest=$$($(DIGEST) "$$overrides" --code $(BUILT_BOOTSTRAPS)) && \
	  cd infra && $(SAM) deploy $(filter-out --guided,$(DEPLOY_FLAGS)) --parameter-overrides "$$overrides ConfigDigest=$$digest"
	$(VENV)/bin/python tools/stack_policy.py --config infra/samconfig.toml --policy infra/stack-policy.json

## The stack policy alone (infra/stack-policy.json; `make deploy` sets it after every deploy):
## CloudFormation then refuses any update that would replace (Update:Replace) or remove
## (Update:Delete) a table or a queue, instead of retaining the old one beside a new, empty one.
## `sam deploy` cannot set one, so tools/stack_policy.py does, with the SAM CLI venv's boto3 and
## the stack name, region and profile saved in infra/samconfig.toml. A deliberate replacement:
## docs/operations.md, "Replacing a table or a queue". Not exercised against AWS by any test.
stack-policy: build-tools
	$(VENV)/bin/python -m pip install --quiet --disable-pip-version-check $(SAM_CLI)
	$(VENV)/bin/python tools/stack_policy.py --config infra/samconfig.toml --policy infra/stack-policy.json

## The same integration suite against LocalStack (Docker, on your machine; not here):
##   docker run -p 4566:4566 localstack/localstack && make localstack-test
localstack-test: tools
	AWS_ENDPOINT_URL=http://localhost:4566 tools/with-emulator.sh $(CARGO) test --workspace --locked

## The real pipeline at its quota (docs/measurements.md#release-3000-and-10000-one-session-2026-12-03; not part
## of `make test`): release `punctual run`, 3,000 reminders without and with 10 % tight work, on
## its own moto + dynalite. Utilisation, 429s, limiter writes per call, requests per message and
## the emulators' CPU share go to target/bench-run.json, set beside the last recording (else
## tools/bench-run-baseline.json) with ratios. BENCH_RUN_ARGS="--runs 3" keeps the median run.
BENCH_RUN_ARGS ?=
bench-run: tools
	$(CARGO) build --locked --release -q -p punctual
	$(VENV)/bin/python tools/bench_run.py $(BENCH_RUN_ARGS)

## The ingest measured for real (docs/measurements.md#ingest; not part of `make test`): 200,000
## renewal commands through the ingest function on its own moto + dynalite, beside dynalite's raw
## conditional-write rate in the same run, with the ingest's requests per command. Writes
## target/bench/ingest.json. BENCH_INGEST_ARGS="--commands 20000 --instances 4" for a short one.
BENCH_INGEST_ARGS ?=
bench-ingest: tools
	$(CARGO) build --locked --release -q -p punctual
	target/release/punctual bench-ingest $(BENCH_INGEST_ARGS)

## The shared limiter measured for real (not part of `make test`): 10 senders against the
## provider double at 100/s, one row per block size. Writes target/bench/limiter.json.
bench-limiter: tools
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(CARGO) run --locked --release -p punctual -- bench-limiter $(BENCH_ARGS)

clean:
	rm -rf $(VENV) $(LOCALSTACK_VENV) target
