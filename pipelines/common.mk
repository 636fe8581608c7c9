# pipelines/common.mk: the stages every tfm pipeline shares, as make rules over real files:
#   text -> SentencePiece model -> token streams -> batches -> checkpoints -> averaged model
#   -> hypotheses -> score
# Included at the end of wmt_ende.mk, wmt_enfr.mk and wsj_parse.mk (rules expand W and the
# corpus files when read), which set PIPE_ROOT, BIN, DATA, W, CONFIG, the corpus
# (TRAIN_SRC ... TEST_TGT, the *_SEL line ranges, PREP), their defaults and the last stage.
#
# Stage files in $(W):
#   train.src train.tgt valid.src valid.tgt test.src test.tgt   text, one sentence a line
#   spm.model                     the shared SentencePiece model
#   *.src.tfm *.tgt.tfm           token streams (eos on every sentence)
#   train.batches.tfm valid.batches.tfm
#   ckpt/step-NNNNNN.tfm, train.done, train.log
#   model.tfm                     the average of the last $(AVG) checkpoints
#   test.hyp.tfm test.hyp.txt     hypotheses as a stream and as text
#   train.png train.svg           the curves of train.log (`plot`)
#   attention/N.tfm, N.*.png      the attention of test sentence N (`attention SENT=N`)
#   settings/NAME                 the variables a stage was made with (see "settings")

TFM = $(BIN)/tfm-

SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -ec
.DELETE_ON_ERROR:
.SUFFIXES:

# ---- the variables a user sets (`make -f ... help` lists them) ------------------------------
THREADS     ?= $(shell nproc 2>/dev/null || echo 1)
VOCAB       ?= 8000
SPM_TYPE    ?= bpe
SPM_SAMPLE  ?= 2000000
SPM_FLAGS   ?= --coverage 1
# SentencePiece's trainer threads are part of the model it makes (tfm-tokenize(1)): a
# number of its own, not THREADS, so that every machine makes the same vocabulary.
SPM_THREADS ?= 16
TOKENS      ?=
MAX_LEN     ?=
SET         ?=
SEED        ?= 1
MAX_STEPS   ?=
MAX_TIME    ?=
SAVE_EVERY  ?=
VALID_EVERY ?= 500
VALID_BLEU  ?=
REPORT_EVERY ?= 100
SENT        ?=
# The checkpoints averaged: the paper's last 5 of a base model, last 20 of a big one
# (d_model 1024 and up, in the effective config).
AVG         ?= $(if $(filter big,$(model_size)),20,5)
# The checkpoints kept (tfm-train --keep): the newest KEEP; unset, all of them.
KEEP        ?=
BEAM        ?=
ALPHA       ?=
MAX_LEN_B   ?=
DEVICE      ?= auto
# Training as several processes: a launcher that starts tfm-train once per process and sets
# their ranks (`srun -n 8`, `mpirun -np 8`); they meet through $(W)/rendezvous, so $(W)
# must be on a file system every process sees.
LAUNCH      ?=
TRAIN_LINES ?=
TEST_LINES  ?=
CLEAN_LEN   ?=
CLEAN_RATIO ?=
SCORE_FLAGS ?=

# Every override of the config, in one place: tfm-train, tfm-batch and the checks agree.
# The pipeline's own (EXTRA_SET, wsj_parse's SIZE=small) first, so that the user's TOKENS,
# MAX_LEN and SET, later, win.
SETS = $(strip $(addprefix --set ,$(EXTRA_SET)) $(if $(TOKENS),--set tokens=$(TOKENS)) \
       $(if $(MAX_LEN),--set max_len=$(MAX_LEN)) $(addprefix --set ,$(SET)))

# The files and directories the pipeline reads and writes, a path each (paths.mk).
PATH_VARS = W BIN DATA CONFIG $(if $(OWN_TEXT),,TRAIN_SRC TRAIN_TGT VALID_SRC VALID_TGT TEST_SRC TEST_TGT) \
            $(EXTRA_PATH_VARS)
include $(PIPE_ROOT)/pipelines/paths.mk
$(call check_paths,$(PATH_VARS))

# The effective config as the makefile is read, a KEY=VALUE word a key (no value holds a
# space), and $(call key,NAME), one value: what the settings of the batches, the training
# and the decoding are made of, so that a config edited or copied without a change of
# value (or touched, or saved again) redoes nothing, and a decoding key only decodes again.
# Empty while tfm-train is not built, or when it refuses the config: the settings are then
# the config's path and SETS, and the recipes that read the config say what is wrong.
# A config that tfm-train refuses stops make here, with its message, before any settings
# file is written (help, clean and plot go on).
config_out := $(if $(and $(wildcard $(BIN)/tfm-train),$(wildcard $(CONFIG))),$(shell \
    $(TFM)train -c $(CONFIG) $(SETS) --print-config 2>&1 | sed 's/ = /=/'; \
    echo "print-config-exit=$${PIPESTATUS[0]}"))
config_now := $(if $(filter print-config-exit=0,$(config_out)),$(filter-out print-config-exit=%,$(config_out)))
ifneq ($(and $(config_out),$(if $(config_now),,1),$(filter-out help clean plot,$(or $(MAKECMDGOALS),all))),)
$(error $(MAKEFILE_NAME): CONFIG=$(CONFIG) $(SETS): $(filter-out print-config-exit=%,$(config_out)))
endif
key = $(patsubst $(1)=%,%,$(filter $(1)=%,$(config_now)))
# The defaults, as an empty config has them: the settings of the training are compared
# without the keys at their default now (below), so that a key added to tfm-train with
# its default does not make a run of an earlier version another run.
config_defaults := $(if $(config_now),$(shell $(TFM)train -c /dev/null --print-config 2> /dev/null | \
    sed 's/ = /=/'))
# (d_model from the config's file itself while tfm-train is not there to say)
model_size := $(shell [ 0$(or $(call key,d_model),$(shell sed -n \
    's/^[[:space:]]*d_model[[:space:]]*=[[:space:]]*\([0-9]*\).*/\1/p' $(CONFIG) 2> /dev/null | \
    tail -1)) -ge 1024 ] 2> /dev/null && echo big)
# The keys that training does not read (the search's; --valid-bleu decodes with them) or
# that a resumed run may change (tfm-train(1), --resume).
RUN_KEYS = beam alpha max_len_b min_len max_steps save_every keep precision
# $(call train_keys,WORDS): the KEY=VALUE words that make a training run what it is: those
# of WORDS not at their default and not run keys.
train_keys = $(filter-out $(config_defaults) $(addsuffix =%,$(RUN_KEYS)),$(1))

# The numbers that awk and the shell read in the recipes, checked before anything is made
# (awk takes TRAIN_LINES=abc for 0 lines, CLEAN_LEN=x for no limit): whole numbers from 1,
# CLEAN_RATIO a decimal from 1 (the longer side's pieces over the shorter's: under 1, every
# pair would be dropped, and 0 would mean no limit); unset, where the variable may be.
no_digits = $(subst 9,,$(subst 8,,$(subst 7,,$(subst 6,,$(subst 5,,$(subst 4,,$(subst 3,,$(subst \
    2,,$(subst 1,,$(subst 0,,$(1)))))))))))
# $(call not_count,VALUE): non-empty unless VALUE is empty or a whole number from 1.
not_count = $(or $(call no_digits,$(1)),$(filter 0%,$(1)))
$(foreach v,TRAIN_LINES TEST_LINES CLEAN_LEN KEEP AVG,$(if $(or $(call not_count,$($(v))),\
    $(if $($(v)),,$(filter AVG,$(v)))),$(error $(MAKEFILE_NAME): $(v)=$($(v)): a whole number from 1 expected)))
$(if $(or $(filter-out .,$(call no_digits,$(CLEAN_RATIO))),$(filter .,$(CLEAN_RATIO)),\
         $(if $(CLEAN_RATIO),$(filter x,$(subst 0,,$(firstword $(subst ., ,x$(CLEAN_RATIO))))))),\
    $(error $(MAKEFILE_NAME): CLEAN_RATIO=$(CLEAN_RATIO): a number from 1 expected, such as 1.5))
# The values that each follow an option of a tool: empty, the option would take the next
# option for its value (--valid-every --max-steps), and the run would stop there, after the
# stages before it, with the tool's usage.
$(foreach v,THREADS VOCAB SPM_TYPE SPM_SAMPLE SPM_THREADS SEED VALID_EVERY REPORT_EVERY DEVICE,$(if $(strip $($(v))),,\
    $(error $(MAKEFILE_NAME): $(v) is empty: it needs a value (make -f pipelines/$(MAKEFILE_NAME) help shows the default))))

LIMITS = $(if $(MAX_STEPS),--max-steps $(MAX_STEPS)) $(if $(MAX_TIME),--max-time $(MAX_TIME)) \
         $(foreach s,$(SAVE_EVERY),--save-every $(s)) $(if $(KEEP),--keep $(KEEP))
# The search: the variable when set, else the effective config's key (the config of now,
# not the one the model was trained with: an edited beam decodes again, and only that).
# $(call search_flag,OPTION,VARIABLE,KEY)
search_flag = $(if $(or $($(2)),$(call key,$(3))),$(1) $(or $($(2)),$(call key,$(3))))
DECODE_FLAGS = $(call search_flag,--beam,BEAM,beam) $(call search_flag,--alpha,ALPHA,alpha) \
               $(call search_flag,--max-len-b,MAX_LEN_B,max_len_b) \
               $(call search_flag,--min-len,,min_len) $(EXTRA_DECODE_FLAGS)

# Lines kept of each split: sed programs, set by the corpus; TRAIN_LINES / TEST_LINES cut
# the training set and the test set to their first N lines.
TRAIN_SEL ?= p
VALID_SEL ?= p
TEST_SEL  ?= p
PREP      ?= cat
head_n     = $(if $(1),| awk 'NR <= $(1)')
# The training text before cleaning (see below): train, or train.raw when it is cleaned.
TRAIN_TEXT = $(if $(CLEAN_LEN)$(CLEAN_RATIO),train.raw,train)

# ---- one run at a time in W -----------------------------------------------------------------
# Two runs in one W would write the same FILE.tmp at once (a text of both, renamed and then
# trusted), and one would delete the checkpoints that the other is training on.  A run
# writes its process id into W/.pipeline.lock (lock-file.sh, hold_lock) before it reads
# anything in W, and a second run, finding a make of that id still running, stops at once,
# saying so; the file of a run that has ended is taken over.  A W that is not there yet
# is claimed as it is made, before the first settings file is written in it.  help and
# plot, which draws the log of a run still training, claim nothing; nor do make -n and -q,
# which write nothing, nor a run in a W that this user may not write (another user's
# finished run, a read-only mount: make score there only reads), which can make no file.
W_LOCK = $(W)/.pipeline.lock
lock_w = { [ -w $(W) ] || exit 0; }; \
         . $(PIPE_ROOT)/pipelines/lock-file.sh; held=$$(hold_lock $$PPID $(W_LOCK)) || \
         { [ -z "$$held" ] || echo "$(MAKEFILE_NAME): W=$(W): another run ($$held) is making files" \
               "there: stopped (make again when it has ended, or remove $(W_LOCK) if it has)"; exit 1; }
ifneq ($(filter-out help plot,$(or $(MAKECMDGOALS),all)),)
ifeq ($(findstring n,$(firstword -$(MAKEFLAGS)))$(findstring q,$(firstword -$(MAKEFLAGS))),)
ifneq ($(wildcard $(W)/.),)
w_lock_said := $(shell { $(lock_w); } 2>&1)
$(if $(filter-out 0,$(.SHELLSTATUS)),$(error $(or $(w_lock_said),$(MAKEFILE_NAME): W=$(W): cannot claim it)),\
    $(if $(w_lock_said),$(info $(w_lock_said))))
endif
endif
endif
$(W):
	@mkdir -p $@; $(lock_w) >&2

# What the pipeline makes in $(W), which clean removes with the FILE.tmp (a recipe's) and
# FILE.tmp.PID (a tool's; the rendezvous's is rendezvous.RANDOM.tmp) that an interrupted
# stage leaves, those alone (W=. may hold .tmp files of the user's); W itself goes when that
# empties it, and is kept, with what it holds besides, otherwise (W may be the user's).
# A W that rmdir cannot remove although empty (., a symbolic link to a directory) is kept
# without a word: it holds nothing to name.
MADE = $(foreach s,train train.raw valid test,$(s).src $(s).tgt $(s).src.tfm $(s).tgt.tfm) \
       settings train.len spm.model train.batches.tfm valid.batches.tfm ckpt rendezvous rendezvous.*.tmp \
       ckpt.old.* train.done train.log model.tfm test.hyp.tfm test.hyp.txt score.txt train.png train.svg \
       attention .pipeline.lock $(EXTRA_MADE)
# $(call rm_made,NAMES): shell code removing NAMES in W, with their FILE.tmp and FILE.tmp.*.
rm_made = rm -rf $(addprefix $(W)/,$(1) $(addsuffix .tmp,$(1)) $(addsuffix .tmp.*,$(1)))

# `make clean all` (clean first, other goals after it): W is cleaned here, as the makefile
# is read, once this run holds W and before anything in W is read, its lock file kept.  As
# a recipe, clean removed the lock of the run that went on to make the other goals (another
# run could then start in W beside it); the settings read below would be those of the
# files it removed; and under -j it ran beside the goals after it, removing what they made.
ifeq ($(firstword $(MAKECMDGOALS)),clean)
ifneq ($(filter-out clean,$(MAKECMDGOALS)),)
ifeq ($(findstring n,$(firstword -$(MAKEFLAGS)))$(findstring q,$(firstword -$(MAKEFLAGS))),)
clean_first := 1
clean_said := $(if $(wildcard $(W)/.),$(shell { $(call rm_made,$(filter-out .pipeline.lock,$(MADE))); } 2>&1))
$(if $(filter-out 0,$(.SHELLSTATUS)),$(error $(or $(clean_said),$(MAKEFILE_NAME): W=$(W): cannot clean it)))
endif
endif
endif

# ---- settings: a changed variable redoes the stages it changes ------------------------------
# $(W)/settings/NAME holds settings.NAME, the variables that stage NAME's files were made
# with ("VOCAB=8000 SPM_TYPE=bpe ..."), and is a prerequisite of those files.  When the
# values now differ from what the file holds (character for character: the spaces in
# PREP='sed ...' or a SEL are part of the program), the file depends on FORCE: it is written
# again, and the stage and everything after it are made again; when they are the same, it
# is left alone and so is the stage.  Files are named by their absolute paths, so another
# corpus file redoes its text even when it is older than the text made before.  Variables
# that only steer a run (THREADS, DEVICE, MAX_STEPS, MAX_TIME, SAVE_EVERY, VALID_EVERY, ...)
# are not settings: a larger MAX_STEPS trains further after `rm $(W)/train.done`.
# A settings file written where there was none (or an empty one, as `make -t` leaves) is
# dated 1970, older than any file: a W made before the settings were kept (or whose
# settings/ was deleted) is taken as made with the values given now, rather than made
# again from its text, its checkpoints deleted; in a new W the stages are made anyway,
# their files being missing.
settings.text-train ?= TRAIN_SRC=$(abspath $(TRAIN_SRC)) TRAIN_TGT=$(abspath $(TRAIN_TGT)) \
    TRAIN_SEL=$(TRAIN_SEL) TRAIN_LINES=$(TRAIN_LINES) PREP=$(PREP) into=$(TRAIN_TEXT)
settings.text-valid ?= VALID_SRC=$(abspath $(VALID_SRC)) VALID_TGT=$(abspath $(VALID_TGT)) \
    VALID_SEL=$(VALID_SEL) PREP=$(PREP)
settings.text-test  ?= TEST_SRC=$(abspath $(TEST_SRC)) TEST_TGT=$(abspath $(TEST_TGT)) \
    TEST_SEL=$(TEST_SEL) TEST_LINES=$(TEST_LINES) PREP=$(PREP)
settings.clean   = CLEAN_LEN=$(CLEAN_LEN) CLEAN_RATIO=$(CLEAN_RATIO)
settings.spm     = VOCAB=$(VOCAB) SPM_TYPE=$(SPM_TYPE) SPM_SAMPLE=$(SPM_SAMPLE) SPM_THREADS=$(SPM_THREADS) \
                   SPM_FLAGS=$(SPM_FLAGS)
config_or_path   = $(if $(config_now),$(1),CONFIG=$(abspath $(CONFIG)) SETS=$(SETS))
settings.batches = $(call config_or_path,tokens=$(call key,tokens) max_len=$(call key,max_len)) SEED=$(SEED)
settings.train   = $(call config_or_path,$(filter-out $(addsuffix =%,$(RUN_KEYS)),$(config_now)))
settings.avg     = AVG=$(AVG)
settings.decode  = DECODE_FLAGS=$(strip $(DECODE_FLAGS))
settings.score  ?= SCORE_FLAGS=$(SCORE_FLAGS)
SETTINGS = text-train text-valid text-test clean spm batches train avg decode score $(EXTRA_SETTINGS)

# $(call quote,TEXT): TEXT as one word of the shell.
quote = '$(subst ','\'',$(1))'
# $(call same,A,B): non-empty when the strings A and B are equal.
same = $(if $(subst x$(1),,x$(2))$(subst x$(2),,x$(1)),,1)

# One that cannot be read (not a regular file, or without read permission) says nothing of
# how the stage was made: it is replaced, and the stage made again; a directory in its
# place is left to the user.
$(W)/settings/%: | $(W)
	@mkdir -p $(@D); printf '%s\n' $(call quote,$(settings.$*)) > $@.tmp; \
	if [ -d $@ ]; then rm -f $@.tmp; \
	    echo "$@: a directory, where the settings of a stage go: remove it" >&2; exit 1; \
	elif [ -e $@ ] && ! { [ -f $@ ] && [ -r $@ ]; }; then echo "$@: cannot read it: made again"; \
	elif [ -s $@ ]; then echo "$@: was $$(cat $@)"; echo "$@: now $$(cat $@.tmp): made again"; \
	else touch -d @0 $@.tmp; fi; \
	mv $@.tmp $@

# The settings files that can be read, the only ones read here: make stops at a directory
# and waits forever at a FIFO (even for clean and help), and stops at a file it may not read.
settings_readable := $(if $(wildcard $(W)/settings),$(shell cd $(call quote,$(W)/settings) && \
    for f in $(SETTINGS); do [ -f "$$f" ] && [ -r "$$f" ] && echo "$$f"; done))
FORCE:
# The settings as a version before this one wrote them, where the values are the same:
# a W of that version goes on as it is (its SentencePiece model then records another
# thread count, its vocabulary unchanged; its checkpoints are judged by their time).
settings_was.spm     = VOCAB=$(VOCAB) SPM_TYPE=$(SPM_TYPE) SPM_SAMPLE=$(SPM_SAMPLE) SPM_FLAGS=$(SPM_FLAGS)
settings_was.batches = CONFIG=$(abspath $(CONFIG)) SETS=$(SETS) SEED=$(SEED)
settings_was.decode  = DECODE_FLAGS=$(strip $(if $(BEAM),--beam $(BEAM)) $(if $(ALPHA),--alpha \
    $(ALPHA)) $(if $(MAX_LEN_B),--max-len-b $(MAX_LEN_B)) $(EXTRA_DECODE_FLAGS))
# The training's settings hold every key, and are compared by the keys not at their default
# now, on both sides: a key that a later version adds at its default is left out of the
# comparison, and a default that changes meets the old value recorded.
settings_read.train = $(call train_keys,$(1))
# $(call settings_as_read,NAME,TEXT): TEXT of the settings NAME as they are compared.
settings_as_read = $(call $(if $(value settings_read.$(1)),settings_read.$(1),same_words),$(2))
settings_in = $(call settings_as_read,$(1),$(file <$(W)/settings/$(1)))
same_words = $(1)
$(foreach n,$(SETTINGS),$(if $(and $(filter $(n),$(settings_readable)),\
    $(or $(call same,$(call settings_as_read,$(n),$(settings.$(n))),$(call settings_in,$(n))),\
         $(if $(settings_was.$(n)),$(call same,$(settings_was.$(n)),$(file <$(W)/settings/$(n)))))),,\
    $(eval $(W)/settings/$(n): FORCE)))

# ---- text ---------------------------------------------------------------------------------
# A pipeline with its own text stage sets OWN_TEXT.
ifndef OWN_TEXT
# A missing corpus file stops the run with DATA_HELP (set by the corpus), unless the
# corpus makes it (CORPUS_MADE: the files with rules of their own).
$(filter-out $(CORPUS_MADE),$(sort $(TRAIN_SRC) $(TRAIN_TGT) $(VALID_SRC) $(VALID_TGT) $(TEST_SRC) $(TEST_TGT))):
	@printf '%s\n' "$(MAKEFILE_NAME): $@: no such file." $(DATA_HELP) >&2; exit 1

# $(call text,FILE,SED,HEAD): decompress, select lines, clean (PREP), into $@ atomically,
# every line ending in a newline: a last line without one would be a sentence that wc -l
# does not count (the test set's size, the cleaning's check of its piece counts).
text = @mkdir -p $(@D); \
       zcat -f $(1) | sed -n '$(2)' | $(PREP) | awk '$(if $(3),NR <= $(3),1)' > $@.tmp; mv $@.tmp $@

$(W)/$(TRAIN_TEXT).src: $(TRAIN_SRC) $(W)/settings/text-train ; $(call text,$<,$(TRAIN_SEL),$(TRAIN_LINES))
$(W)/$(TRAIN_TEXT).tgt: $(TRAIN_TGT) $(W)/settings/text-train ; $(call text,$<,$(TRAIN_SEL),$(TRAIN_LINES))
$(W)/valid.src: $(VALID_SRC) $(W)/settings/text-valid ; $(call text,$<,$(VALID_SEL))
$(W)/valid.tgt: $(VALID_TGT) $(W)/settings/text-valid ; $(call text,$<,$(VALID_SEL))
$(W)/test.src:  $(TEST_SRC) $(W)/settings/text-test ; $(call text,$<,$(TEST_SEL),$(TEST_LINES))
$(W)/test.tgt:  $(TEST_TGT) $(W)/settings/text-test ; $(call text,$<,$(TEST_SEL),$(TEST_LINES))
endif

# ---- cleaning of the training pairs, by their length in pieces -----------------------------
# With CLEAN_LEN or CLEAN_RATIO set, the text stage writes train.raw.{src,tgt}, the
# SentencePiece model learns from them, and train.{src,tgt} keep the pairs whose sides
# both have 1 to CLEAN_LEN pieces (eos not counted) and whose longer side has at most
# CLEAN_RATIO times the pieces of the shorter: Moses's clean-corpus-n.perl's rule, on
# pieces instead of words.  train.len holds the piece counts of every pair, "src tgt".
ifneq ($(CLEAN_LEN)$(CLEAN_RATIO),)
pieces = $(TFM)tokenize encode -m $(W)/spm.model --threads $(THREADS) --quiet $(1) | \
         $(TFM)tokenize decode --ids | awk '{ print NF }'
$(W)/train.len: $(W)/train.raw.src $(W)/train.raw.tgt $(W)/spm.model | $(BIN)/tfm-tokenize
	paste -d ' ' <($(call pieces,$(W)/train.raw.src)) <($(call pieces,$(W)/train.raw.tgt)) | \
	    awk 'NF != 2 { print "$(MAKEFILE_NAME): $(W)/train.raw.src and .tgt: line counts differ" \
	                   > "/dev/stderr"; exit 1 } 1' > $@.tmp
	[ $$(wc -l < $@.tmp) -eq $$(wc -l < $(W)/train.raw.src) ] || \
	    { echo "$(MAKEFILE_NAME): $@: piece counts missing" >&2; exit 1; }
	mv $@.tmp $@

# $(call keep,SIDE): the lines of train.raw.SIDE whose pair passes.
keep = paste -d '\t' $(W)/train.len $(W)/train.raw.$(1) | \
       awk -v max=$(or $(CLEAN_LEN),0) -v ratio=$(or $(CLEAN_RATIO),0) -v report=$(if $(filter src,$(1)),1,0) ' \
           { s = $$1; t = $$2; why = "" } \
           s == 0 || t == 0 { why = "empty" } \
           why == "" && max > 0 && (s > max || t > max) { why = "long" } \
           why == "" && ratio > 0 && (s > ratio * t || t > ratio * s) { why = "ratio" } \
           why != "" { dropped[why]++; next } \
           { kept++; print substr($$0, index($$0, "\t") + 1) } \
           END { if (report) printf "$(W)/train: %d of %d pairs kept; dropped %d empty, %d over %s pieces, %d over ratio %s\n", \
                     kept, NR, dropped["empty"], dropped["long"], max, dropped["ratio"], ratio > "/dev/stderr" }'
$(W)/train.src: $(W)/train.len $(W)/train.raw.src $(W)/settings/clean ; @$(call keep,src) > $@.tmp; mv $@.tmp $@
$(W)/train.tgt: $(W)/train.len $(W)/train.raw.tgt $(W)/settings/clean ; @$(call keep,tgt) > $@.tmp; mv $@.tmp $@
endif

# ---- the tools: each stage's are order-only prerequisites, so that a missing one stops the
# stage with this message, and a rebuilt one redoes nothing
# (named without the // of a BIN that ends in /)
$(BIN)/tfm-%:
	@echo "$(MAKEFILE_NAME): $(subst //,/,$@): no such tool: build tfm first (make in $(PIPE_ROOT)), or set BIN" >&2; exit 1

# ---- SentencePiece model and token streams -------------------------------------------------
$(W)/spm.model: $(W)/$(TRAIN_TEXT).src $(W)/$(TRAIN_TEXT).tgt $(W)/settings/spm | $(BIN)/tfm-tokenize
	$(TFM)tokenize train -m $@ --vocab $(VOCAB) --type $(SPM_TYPE) \
	    --max-sentences $(SPM_SAMPLE) --threads $(SPM_THREADS) $(SPM_FLAGS) $(wordlist 1,2,$^)

$(W)/%.tfm: $(W)/% $(W)/spm.model | $(BIN)/tfm-tokenize
	$(TFM)tokenize encode -m $(W)/spm.model --eos --threads $(THREADS) --quiet -o $@ $<

# ---- batches: the budget and the length limit come from the effective config ---------------
$(CONFIG):
	@echo "$(MAKEFILE_NAME): CONFIG=$@: no such file (configs/ has the bundled ones)" >&2; exit 1

# The config by the values of its keys (settings/batches), not by its file's time: an edit
# of another key does not make the batches again.  The values are the effective config's
# as the makefile read it (config_now: with tfm-train and CONFIG there, as this recipe
# needs them).  (set -x shows the command on one line)
$(W)/%.batches.tfm: $(W)/%.src.tfm $(W)/%.tgt.tfm $(W)/settings/batches | $(BIN)/tfm-batch $(BIN)/tfm-train $(CONFIG)
	@set -x; $(TFM)batch --tokens $(call key,tokens) --max-len $(call key,max_len) --seed $(SEED) \
	    --quiet -o $@ $(W)/$*.src.tfm $(W)/$*.tgt.tfm

# ---- training -------------------------------------------------------------------------------
# $(call made_with,FILE): the record of FILE as it is compared (keys at their default left
# out, as settings_as_read has them), and its batches; empty unless FILE is a regular file
# one may read.
made_with = $(if $(shell [ -f $(call quote,$(1)) ] && [ -r $(call quote,$(1)) ] && echo 1),$(strip \
    $(call train_keys,$(file <$(1)))))

# An interrupted run resumes from its newest checkpoint.  ckpt/made-with records what the
# checkpoints were trained with: the training keys of the config (settings/train), compared
# by those not at their default now, and the checksum of the batches.  When they differ
# now (another config or SET, new batches; batches made again with the same bytes are the
# same), the checkpoints belong to another run: ckpt/ is moved aside to ckpt.old.N (clean
# alone removes it), and the run starts afresh.  A ckpt/ from before made-with was kept
# goes aside when a checkpoint is older than the batches, as it was then.
# `rm $(W)/train.done` and make again to train further (with a larger MAX_STEPS or another
# MAX_TIME).
$(W)/train.done: $(W)/train.batches.tfm $(W)/valid.batches.tfm $(W)/settings/train | $(BIN)/tfm-train $(CONFIG)
	@b="batches=$$(cksum < $<)"; made=$(call quote,$(settings.train))" $$b"; \
	now=$(call quote,$(strip $(call train_keys,$(settings.train)))); now="$${now:+$$now }$$b"; c=$(W)/ckpt; \
	if [ -f $$c/made-with ]; then [ $(call quote,$(call made_with,$(W)/ckpt/made-with)) = "$$now" ] || stale=1; \
	else [ -z "$$(find $$c -name 'step-*.tfm' ! -newer $< 2> /dev/null)" ] || stale=1; fi; \
	if [ -n "$${stale-}" ] && [ -n "$$(find $$c -name 'step-*.tfm' 2> /dev/null)" ]; then \
	    n=1; while [ -e $$c.old.$$n ]; do n=$$((n + 1)); done; mv $$c $$c.old.$$n; \
	    echo "$$c: checkpoints of other batches or another config: moved to $$c.old.$$n" \
	         "(remove it to free its space); starting afresh" >&2; fi; \
	mkdir -p $$c; printf '%s\n' "$$made" > $$c/made-with.tmp; mv $$c/made-with.tmp $$c/made-with
	$(if $(LAUNCH),rm -f $(W)/rendezvous; TFM_RENDEZVOUS=$(abspath $(W))/rendezvous $(LAUNCH)) \
	$(TFM)train -c $(CONFIG) $(SETS) -o $(W)/ckpt --resume --valid $(W)/valid.batches.tfm \
	    --valid-every $(VALID_EVERY) $(if $(VALID_BLEU),--valid-bleu) $(LIMITS) --device $(DEVICE) --threads $(THREADS) \
	    --log $(W)/train.log --progress --report-every $(REPORT_EVERY) $<
	touch $@
# train.done without the checkpoints it records (ckpt/ deleted) and without their average:
# train again.  With model.tfm there, ckpt/ was deleted after averaging (to free the space
# of days of checkpoints), and the model serves as it is: decoding, the score and the
# pictures need nothing else, and only another average (AVG) needs the checkpoints.
ifneq ($(wildcard $(W)/train.done),)
ifeq ($(wildcard $(W)/ckpt/step-*.tfm)$(wildcard $(W)/model.tfm),)
$(W)/train.done: FORCE
endif
endif

# The average of the last AVG checkpoints (fewer when fewer were written).
$(W)/model.tfm: $(W)/train.done $(W)/settings/avg | $(BIN)/tfm-avg
	@set -- $(W)/ckpt/step-*.tfm; [ -e "$$1" ] || { echo "$(W)/ckpt: no checkpoint to average:" \
	    "rm $(W)/model.tfm to train again" >&2; exit 1; }; \
	n=$$#; if [ $$n -ge $(AVG) ]; then n=$(AVG); else \
	    echo "$(W)/ckpt: $$n checkpoints, fewer than AVG=$(AVG): the average of $$n" >&2; fi; \
	set -x; $(TFM)avg -n $$n -o $@ $(W)/ckpt

# ---- decoding -------------------------------------------------------------------------------
$(W)/test.hyp.tfm: $(W)/model.tfm $(W)/test.src.tfm $(W)/settings/decode | $(BIN)/tfm-decode
	$(TFM)decode -m $< $(DECODE_FLAGS) --threads $(THREADS) --device $(DEVICE) --quiet \
	    -o $@ $(W)/test.src.tfm

$(W)/test.hyp.txt: $(W)/test.hyp.tfm | $(BIN)/tfm-tokenize
	$(TFM)tokenize decode $< > $@.tmp; mv $@.tmp $@

# ---- the score: sacreBLEU's BLEU of the detokenized hypotheses, printed and kept -------------
# The recipe that makes score.txt prints it, unless `score` is a goal of this make: that
# target prints score.txt, made now or before, and the score would show twice.
score_goal := $(filter score,$(MAKECMDGOALS))
ifndef OWN_SCORE
$(W)/score.txt: $(W)/test.hyp.tfm $(W)/test.tgt $(W)/settings/score | $(BIN)/tfm-score
	$(TFM)score -r $(W)/test.tgt $(SCORE_FLAGS) $< > $@.tmp; mv $@.tmp $@
	@$(if $(score_goal),:,echo "$(W): $$(wc -l < $(W)/test.tgt) test sentences:"; cat $@)
endif

# ---- pictures -------------------------------------------------------------------------------
# The curves of the training log, drawn from what it holds now: a run still writing it can
# be plotted, from another shell, as often as wanted.
plot:
	$(PIPE_ROOT)/pipelines/plot-train $(W)/train.log $(W)/train
	@echo "$(W)/train.png $(W)/train.svg"

# The attention of test sentence SENT (its line number): the sentence decoded alone with
# the averaged model, every layer's encoder-decoder, encoder and decoder self-attention
# written as a stream (tfm-decode --attention) and drawn as heat maps, one picture a layer
# and kind with a panel a head: attention/SENT.{cross,enc,dec}.LAYER.png.
# SENT is checked when the makefile is read, before the model it needs is trained; whether
# test.src has that line, in the recipe, once test.src is made.
ifneq ($(filter attention,$(MAKECMDGOALS)),)
$(if $(or $(call not_count,$(SENT)),$(if $(SENT),,1)),$(error \
    $(MAKEFILE_NAME): attention: SENT=n, a line of $(W)/test.src$(if $(wildcard $(W)/test.src), \
    (1 to $(shell wc -l < $(W)/test.src))), is needed))
endif
attention: $(W)/model.tfm $(W)/test.src $(W)/spm.model | $(BIN)/tfm-tokenize $(BIN)/tfm-decode $(BIN)/tfm-cat
	@n=$$(wc -l < $(W)/test.src); [ "$(SENT)" -le $$n ] || \
	    { echo "$(MAKEFILE_NAME): attention: SENT=$(SENT): $(W)/test.src has $$n lines" >&2; exit 1; }
	@mkdir -p $(W)/attention
	sed -n '$(SENT){p;q}' $(W)/test.src | \
	    $(TFM)tokenize encode -m $(W)/spm.model --eos --quiet | \
	    $(TFM)decode -m $(W)/model.tfm $(DECODE_FLAGS) --threads $(THREADS) --device $(DEVICE) \
	        --quiet --text --attention $(W)/attention/$(SENT).tfm --attention-all
	$(PIPE_ROOT)/pipelines/plot-attention -o $(W)/attention/$(SENT) -l 'test sentence $(SENT)' \
	    $(W)/attention/$(SENT).tfm

# ---- housekeeping ---------------------------------------------------------------------------
# Every stage file named, so that none is an intermediate file of make's: a deleted one is
# made again (and what depends on it).
stages: $(foreach s,train valid test,$(W)/$(s).src.tfm $(W)/$(s).tgt.tfm) \
        $(W)/train.batches.tfm $(W)/valid.batches.tfm $(W)/test.hyp.txt

score: $(W)/score.txt
	@cat $<

clean:
ifdef clean_first
	@: cleaned as the makefile was read
else
	@$(call rm_made,$(MADE))
	@[ ! -d $(W) ] || rmdir $(W) 2> /dev/null || [ -z "$$(ls -A $(W))" ] || \
	    echo "$(W): kept: it holds files that $(MAKEFILE_NAME) did not make:" $$(ls -A $(W) | head -5)
endif

# One shell for the whole text, deaf to SIGPIPE: `help | head` ends quietly (an echo into
# the closed pipe fails, unheard), where a shell a line, killed by the signal, had make
# report "Broken pipe" and fail.
help:
	@trap '' PIPE; { \
	    echo "make -f pipelines/$(MAKEFILE_NAME) [VARIABLE=value ...] [all|score|plot|attention SENT=n|$(if $(HELP_TARGETS),$(HELP_TARGETS)|)clean|help]"; \
	    printf '  %s\n' $(HELP_CORPUS); \
	    $(if $(OWN_TEXT),,echo "  TRAIN_SRC=$(TRAIN_SRC) TRAIN_TGT=$(TRAIN_TGT)"; \
	    echo "  VALID_SRC=$(VALID_SRC) VALID_TGT=$(VALID_TGT)"; \
	    echo "  TEST_SRC=$(TEST_SRC) TEST_TGT=$(TEST_TGT)  the text of each set (.gz read too)";) \
	    echo "  DATA=$(DATA)  the bundled corpora"; \
	    echo "  W=$(W)  the work directory (clean removes what the pipeline made there)"; \
	    echo "  BIN=$(BIN)  the tools"; \
	    echo "  CONFIG=$(CONFIG)  SET='key=value ...'  the config and overrides of its keys"; \
	    echo "  VOCAB=$(VOCAB) SPM_TYPE=$(SPM_TYPE) SPM_SAMPLE=$(SPM_SAMPLE) SPM_THREADS=$(SPM_THREADS) SPM_FLAGS='$(SPM_FLAGS)'  the shared SentencePiece model"; \
	    echo "  TOKENS=$(TOKENS) MAX_LEN=$(MAX_LEN)  batch budget, longest sentence (default: the config's)"; \
	    echo "  MAX_STEPS=$(MAX_STEPS) MAX_TIME=$(MAX_TIME)  training budget (MAX_TIME counts per run)"; \
	    echo "  SAVE_EVERY=$(SAVE_EVERY) AVG=$(AVG) KEEP=$(KEEP)  checkpoint interval (time or updates), checkpoints averaged, kept (unset: all)"; \
	    echo "  BEAM=$(BEAM) ALPHA=$(ALPHA) MAX_LEN_B=$(MAX_LEN_B)  decoding (default: the config's, as it is now)"; \
	    echo "  TRAIN_LINES=$(TRAIN_LINES) TEST_LINES=$(TEST_LINES)  use only the first N lines"; \
	    echo "  CLEAN_LEN=$(CLEAN_LEN) CLEAN_RATIO=$(CLEAN_RATIO)  training pairs kept: 1 to CLEAN_LEN pieces a side, length ratio at most CLEAN_RATIO (unset: all)"; \
	    echo "  THREADS=$(THREADS) DEVICE=$(DEVICE) SEED=$(SEED) VALID_EVERY=$(VALID_EVERY) SCORE_FLAGS=$(SCORE_FLAGS)"; \
	    echo "  VALID_BLEU=$(VALID_BLEU)  non-empty: validation BLEU too (tfm-train --valid-bleu), logged and plotted"; \
	    echo "  REPORT_EVERY=$(REPORT_EVERY)  updates between the lines of train.log (plot draws them)"; \
	    echo "  SENT=$(SENT)  attention: the test sentence (line number) whose attention is drawn"; \
	    echo "  LAUNCH=$(LAUNCH)  train as several processes, e.g. LAUNCH='srun -n 8' (W on a shared file system)"; \
	} 2> /dev/null || :

.PHONY: FORCE all attention clean help plot score stages
