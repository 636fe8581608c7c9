# pipelines/wsj_parse.mk: English constituency parsing as in Vaswani et al. (2017) §6.3:
# trees are linearized (tfm-score --linearize), words are the source and linearized trees
# the target of a Transformer (configs/parse.conf: beam 21, alpha 0.3, max length input +
# 300), decoded trees are restored with the source words (tfm-score --restore) and scored
# with EVALB's COLLINS.prm (tfm-score --metric f1).
#   make -f pipelines/wsj_parse.mk                 the bundled NLTK WSJ sample, small model
#   make -f pipelines/wsj_parse.mk SIZE=paper TRAIN_TREES=wsj-02-21.mrg VALID_TREES=wsj-22.mrg \
#       TEST_TREES=wsj-23.mrg        the Penn Treebank's WSJ sections, each set's .mrg files
#                                    joined into one (cat 02/*.mrg ... 21/*.mrg > wsj-02-21.mrg)
#   make -f pipelines/wsj_parse.mk help

MAKEFILE_NAME := wsj_parse.mk
PIPE_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))..)
# make splits a name at spaces: in a directory whose path has one, PIPE_ROOT is wrong.
$(if $(wildcard $(PIPE_ROOT)/pipelines/common.mk),,$(error $(MAKEFILE_NAME): cannot find \
    pipelines/common.mk beside '$(MAKEFILE_LIST)': make cannot read a path with a space))
BIN       ?= $(PIPE_ROOT)/bin
DATA      ?= $(PIPE_ROOT)/data

# Trees, one a line or .mrg (several lines a tree), plain or gzip.  The NLTK sample: 3253 training trees
# (wsj_0001-0149) and 248 development trees (wsj_0150-0169), which serve for validation and
# for the score, since its test files are held out.
P           := $(DATA)/ptb-nltk-sample
TRAIN_TREES ?= $(P)/wsj_0001-0149.train.oneline.txt
VALID_TREES ?= $(P)/wsj_0150-0169.dev.oneline.txt
TEST_TREES  ?= $(P)/wsj_0150-0169.dev.oneline.txt
EVALB_PRM   ?= $(DATA)/evalb-fixtures/COLLINS.prm
W           ?= work/wsj_parse
CONFIG      ?= $(PIPE_ROOT)/configs/parse.conf
REVERSE     ?= 0
EXTRA_PATH_VARS := TRAIN_TREES VALID_TREES TEST_TREES EVALB_PRM
EXTRA_MADE := $(foreach s,train valid test,$(s).lin $(s).words) test.gold test.trees \
              test.hyp.lin test.rb.txt baseline.txt unlabeled.prm

# The targets (LEAVES): the linearized trees with the words in place (words, the default),
# or with XX as the paper and Vinyals et al. (2015) wrote them (xx), or with POS tags (tags).
# The decoder searches only for trees over the source's words (TREE, tfm-decode --tree):
# copy with words (the leaves are the source's pieces, so the model chooses only the
# brackets), count otherwise (as many leaves as words; also with REVERSE=1, where the
# leaves come in the other order than the source); TREE=off lets the model write anything.
# On the sample, in 10 minutes (tests/bench/RESULTS.md, 2026-11-26): XX targets decoded
# freely give F1 17, tags 24 (the decoder drops words: a tree of the wrong length); tags
# with --tree count 29; words decoded freely about 40, words with --tree copy 66.
#
# SIZE=small (the default) trains a 2-layer, 128-wide model on a CPU for 10 minutes and
# decodes in about half a minute more; SIZE=paper the 4 x 1024 model of configs/parse.conf
# as it is (a GPU's job).  The sample is small (about 320k tokens an epoch): 10 minutes on
# 2 quiet cores are about 10,000 updates of 1024 tokens, with a 300-update warmup, lr_scale
# 1.5, pre-norm (which trains stably at that rate) and dropout 0.1.
SIZE ?= small
ifeq ($(SIZE),small)
EXTRA_SET := layers=2 d_model=128 d_ff=512 heads=4 norm=pre lr_scale=1.5 warmup=300 \
             tokens=1024 dropout=0.1 attn_dropout=0
MAX_TIME  ?= 10m
SAVE_EVERY ?= 1m
else ifneq ($(SIZE),paper)
$(error $(MAKEFILE_NAME): SIZE=$(SIZE): use small or paper)
endif

LEAVES    ?= words
ifeq ($(filter $(LEAVES),words xx tags),)
$(error $(MAKEFILE_NAME): LEAVES=$(LEAVES): use words, xx or tags)
endif
ifeq ($(filter $(REVERSE),0 1),)
$(error $(MAKEFILE_NAME): REVERSE=$(REVERSE): use 0 or 1)
endif
TREE      ?= $(if $(and $(filter words,$(LEAVES)),$(filter-out 1,$(REVERSE))),copy,count)
ifeq ($(filter $(TREE),copy count off),)
$(error $(MAKEFILE_NAME): TREE=$(TREE): use copy, count or off)
endif
# Linearized trees are one piece a token when pieces may mix brackets and letters.  Each
# word is one token of the decoder's text, or restoration gives the words after it the
# wrong leaves: the text is not normalized (NFKC would make a full-width bracket a bracket
# and a no-break space a space), and a character the training text lacks decodes as
# U+2047 without the spaces SentencePiece puts around it by default.
# The paper's WSJ-only vocabulary is 16K pieces; the bundled sample (3253 trees) has too
# little text for that many, and SIZE=small takes 4000.
VOCAB     ?= $(if $(filter paper,$(SIZE)),16000,4000)
SPM_FLAGS ?= --coverage 1 --trainer-option split_by_unicode_script=false \
             --trainer-option normalization_rule_name=identity --trainer-option unk_surface=⁇
HELP_TARGETS = baseline
HELP_CORPUS = "SIZE=$(SIZE)  small (CPU, default) or paper (configs/parse.conf as it is)" \
    "TRAIN_TREES=$(TRAIN_TREES)" "VALID_TREES=$(VALID_TREES)" "TEST_TREES=$(TEST_TREES)" \
    "EVALB_PRM=$(EVALB_PRM)  the EVALB parameter file" \
    "REVERSE=$(REVERSE)  1: the model reads the words in reverse order" \
    "LEAVES=$(LEAVES)  what the targets have where a word goes: words, xx or tags (POS)" \
    "TREE=$(TREE)  tfm-decode --tree: copy, count or off"

all: $(W)/score.txt $(W)/test.trees $(W)/test.hyp.lin $(W)/test.words $(W)/test.src

baseline: $(W)/baseline.txt
	@cat $<

# ---- text: "words<TAB>linearized tree" per tree, split into source and target ---------------
OWN_TEXT  := 1
OWN_SCORE := 1
$(sort $(TRAIN_TREES) $(VALID_TREES) $(TEST_TREES) $(EVALB_PRM)):
	@echo "$(MAKEFILE_NAME): $@: no such file (set TRAIN_TREES, VALID_TREES, TEST_TREES, EVALB_PRM)" >&2; exit 1

# LEAVES=tags: the targets keep the POS tags where XX stands (tfm-score --keep-tags);
# words: the words (--keep-words).  The score gives every preterminal the gold tag, so that
# F1 is that of the brackets alone.
LIN_FLAGS = $(if $(filter tags,$(LEAVES)),--keep-tags)$(if $(filter words,$(LEAVES)),--keep-words)
lin = @mkdir -p $(@D); $(TFM)score --linearize $(LIN_FLAGS) $(1) $(call head_n,$(2)) > $@.tmp; mv $@.tmp $@
# The settings of these stages (common.mk, "settings"): a changed variable redoes them.
settings.text-train = TRAIN_TREES=$(abspath $(TRAIN_TREES)) TRAIN_LINES=$(TRAIN_LINES) LIN_FLAGS=$(LIN_FLAGS)
settings.text-valid = VALID_TREES=$(abspath $(VALID_TREES)) LIN_FLAGS=$(LIN_FLAGS)
settings.text-test  = TEST_TREES=$(abspath $(TEST_TREES)) TEST_LINES=$(TEST_LINES) LIN_FLAGS=$(LIN_FLAGS)
settings.source     = REVERSE=$(REVERSE)
settings.score      = SCORE_FLAGS=$(SCORE_FLAGS) EVALB_PRM=$(abspath $(EVALB_PRM))
EXTRA_SETTINGS      = source
$(W)/train.lin: $(TRAIN_TREES) $(W)/settings/text-train | $(BIN)/tfm-score ; $(call lin,$<,$(TRAIN_LINES))
$(W)/valid.lin: $(VALID_TREES) $(W)/settings/text-valid | $(BIN)/tfm-score ; $(call lin,$<)
$(W)/test.lin:  $(TEST_TREES) $(W)/settings/text-test | $(BIN)/tfm-score ; $(call lin,$<,$(TEST_LINES))
# A test set that cannot be read stops the run before training rather than after it
# (order-only: a new test set does not train again).
$(W)/train.done: | $(W)/test.lin

# The words of each tree (test.words: what restoration and the score read) and the model's
# source (%.src): the words, or with REVERSE=1 the words in reverse order, as Vinyals et
# al. (2015) fed their parser.
$(W)/%.words: $(W)/%.lin ; cut -f1 $< > $@.tmp; mv $@.tmp $@
reverse_words = awk '{ for (i = NF; i > 1; i--) printf "%s ", $$i; print $$1 }'
$(W)/%.src: $(W)/%.lin $(W)/settings/source
	cut -f1 $< $(if $(filter 1,$(REVERSE)),| $(reverse_words)) > $@.tmp; mv $@.tmp $@
$(W)/%.tgt: $(W)/%.lin ; cut -f2 $< > $@.tmp; mv $@.tmp $@
# Named, so that make keeps them rather than deleting them as intermediate files.
$(W)/valid.src $(W)/valid.tgt:

# The gold trees of the test set, one a line (the first TEST_LINES), read as test.lin reads
# them: from either layout, several trees on a line, CRLF or gzip alike.
$(W)/test.gold: $(TEST_TREES) $(W)/settings/text-test | $(BIN)/tfm-score
	@mkdir -p $(@D)
	$(TFM)score --oneline $< $(call head_n,$(TEST_LINES)) > $@.tmp; mv $@.tmp $@

# ---- after decoding: restore the trees with the source words, and score them ----------------
# The decoder's text output (test.hyp.txt) is restored as it is: tfm-score makes one tree of
# every line with exactly the source words (an early close of the outermost constituent is
# deferred, preterminals before the first constituent get a root S, words where XX goes
# are preterminals like XX), and the score gives every preterminal the gold tag, so that
# punctuation is deleted alike on both sides (see tfm-score(1), Restoration).

# The restored trees, to read; the score restores them again by the same rule (root S).
$(W)/test.trees: $(W)/test.hyp.txt $(W)/test.words | $(BIN)/tfm-score
	$(TFM)score --restore --source $(W)/test.words $< > $@.tmp; mv $@.tmp $@

# The restored trees linearized again: the decoder's output as restoration repaired it, in
# the form of test.tgt, to compare with it line by line.
$(W)/test.hyp.lin: $(W)/test.trees $(W)/settings/score | $(BIN)/tfm-score
	$(TFM)score --linearize $(sort $(LIN_FLAGS) $(filter --keep-tags,$(SCORE_FLAGS))) $< | cut -f2 > $@.tmp
	mv $@.tmp $@

# Printed with the baseline after it, unless `score` is a goal: that target prints
# score.txt alone, made now or before (`baseline` prints the baseline).
$(W)/score.txt: $(W)/test.hyp.txt $(W)/test.words $(W)/test.gold $(EVALB_PRM) $(W)/baseline.txt \
               $(W)/settings/score | $(BIN)/tfm-score
	$(TFM)score --metric f1 --param $(EVALB_PRM) -r $(W)/test.gold --source $(W)/test.words \
	    $(SCORE_FLAGS) $< > $@.tmp; mv $@.tmp $@
	@$(if $(score_goal),:,echo "$(W): $$(wc -l < $(W)/test.gold) test trees:"; cat $@; \
	    echo "right-branching baseline on the same trees:"; sed 's/^/  /' $(W)/baseline.txt)

# The right-branching baseline, what a parser must beat: every sentence of n words as
# (S w1 (VP w2 (VP ... (VP wn-1 wn)))), restored and scored as the decoder's output
# (preterminals get the gold tags), labeled with EVALB_PRM (VP, the commonest label of a
# right-branching spine in English) and unlabeled (EVALB_PRM with LABELED 0).
$(W)/test.rb.txt: $(W)/test.words
	awk '{ s = ""; for (i = 1; i < NF; i++) s = s (i == 1 ? "(S" : "(VP") " XX "; s = s "XX"; \
	       for (i = NF - 1; i >= 1; i--) s = s (i == 1 ? " )S" : " )VP"); print s }' $< > $@.tmp
	mv $@.tmp $@
$(W)/baseline.txt: $(W)/test.rb.txt $(W)/test.words $(W)/test.gold $(EVALB_PRM) $(W)/settings/score | $(BIN)/tfm-score
	sed 's/^LABELED[ \t]*1/LABELED 0/' $(EVALB_PRM) > $(W)/unlabeled.prm
	{ echo "labeled:"; \
	  $(TFM)score --metric f1 --param $(EVALB_PRM) -r $(W)/test.gold --source $(W)/test.words $<; \
	  echo "unlabeled:"; \
	  $(TFM)score --metric f1 --param $(W)/unlabeled.prm -r $(W)/test.gold --source $(W)/test.words $<; \
	} > $@.tmp; mv $@.tmp $@

EXTRA_DECODE_FLAGS = --tree $(TREE)
include $(PIPE_ROOT)/pipelines/common.mk
.PHONY: baseline
