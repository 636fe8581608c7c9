# pipelines/wmt14.mk: the WMT14 data of wmt_ende.mk (CORPUS=wmt14) and wmt_enfr.mk, made
# from the official WMT archives as make rules over real files, and the score of both: the
# sacreBLEU of the detokenized text next to the paper's tokenized BLEU.  Included by those
# files, after their `all` rule and before common.mk; they set L2 (de or fr), WMT14_DIR and
# WMT14_CORPORA, the training corpora as ARCHIVE:MEMBER with @ for the language.
#
#   WMT_DL/NAME                       an archive, downloaded and checked (wmt14-fetch.sh)
#   WMT14_DIR/train.en train.L2       the members of WMT14_CORPORA, concatenated in order
#   WMT14_DIR/newstest2014.en .L2     the test set, the text of the SGML in dev.tgz
# Files already in WMT14_DIR are used as they are, and the archives are needed only to
# make the missing ones: they are order-only prerequisites and secondary files, so that
# neither a newer archive nor a deleted one redoes anything.  Each archive is checked (size
# and SHA-256) again right before it is read.

# The corpus rules below match DIR/train.en: WMT14_DIR=. is named by its path instead, since
# make reads ./train.en as train.en, which no rule matches.
override WMT14_DIR := $(if $(filter . ./,$(WMT14_DIR)),$(CURDIR),$(WMT14_DIR))
WMT_MIRROR  ?=
WMT_SUMS    ?= $(PIPE_ROOT)/pipelines/wmt14.sums
WMT_DL      ?= wmt-archives
WMT_CONNECT_TIMEOUT ?= 20
# A path each, checked here (common.mk checks the others): these are in rules before it.
include $(PIPE_ROOT)/pipelines/paths.mk
$(call check_paths,WMT14_DIR WMT_DL WMT_SUMS)
# The paper's BLEU tokenizes both sides with PAPER_TOK (a command, stdin to stdout), by
# default the mteval-v13a rules of tokenize-13a.pl; Moses's, for instance:
#   PAPER_TOK='perl mosesdecoder/scripts/tokenizer/tokenizer.perl -q -l de'
PAPER_TOK   ?=

FETCH = WMT_MIRROR='$(WMT_MIRROR)' WMT_SUMS='$(WMT_SUMS)' \
        WMT_CONNECT_TIMEOUT='$(WMT_CONNECT_TIMEOUT)' $(PIPE_ROOT)/pipelines/wmt14-fetch.sh $(WMT_DL)

WMT_TRAIN_ARCHIVES := $(sort $(foreach c,$(WMT14_CORPORA),$(firstword $(subst :, ,$(c)))))
WMT_ARCHIVES       := $(WMT_TRAIN_ARCHIVES) dev.tgz
# newstest2014 as tensorflow-datasets reads it from dev.tgz: English in the -ref.en file,
# the other language in the -src one.
WMT_TEST_EN := dev/newstest2014-$(L2)en-ref.en.sgm
WMT_TEST_L2 := dev/newstest2014-$(L2)en-src.$(L2).sgm

CORPUS_MADE := $(WMT14_DIR)/train.en $(WMT14_DIR)/train.$(L2) \
               $(WMT14_DIR)/newstest2014.en $(WMT14_DIR)/newstest2014.$(L2)
CLEAN_LEN   ?= 250
CLEAN_RATIO ?= 1.5
# A checkpoint of the base model with its Adam moments is about 0.76 GB, of a big one 2.5 GB,
# one every 10 minutes for days: only the newest AVG, which the average needs, are kept.
KEEP        ?= $(AVG)

WMT_HELP_VARS = "WMT_MIRROR=$(WMT_MIRROR)  a mirror URL or local directory with the archives (unset: the official addresses)" \
    "WMT_DL=$(WMT_DL)  where the archives go  WMT_SUMS=$(WMT_SUMS)  their sizes and SHA-256" \
    "PAPER_TOK=$(PAPER_TOK)  the paper's BLEU's tokenizer (unset: the mteval-v13a rules, not Moses)" \
    "download  the target that fetches and checks the archives only"

# What a failed download needs: the archives and their sizes, or the ready files.
WMT_HELP = "$(MAKEFILE_NAME) needs these archives in WMT_DL=$(WMT_DL) (sizes in bytes):" \
    $(shell awk 'index(" $(WMT_ARCHIVES) ", " " $$1 " ") { printf "\"  %s %s\"\n", $$1, $$2 }' $(WMT_SUMS)) \
    $(if $(WMT_MIRROR),"downloaded from WMT_MIRROR=$(WMT_MIRROR)",\
        "downloaded from the addresses in WMT_SUMS=$(WMT_SUMS)," \
        "or from WMT_MIRROR, when set to a mirror or a local directory that holds them;") \
    "or ready files in WMT14_DIR=$(WMT14_DIR): train.en train.$(L2) newstest2014.en newstest2014.$(L2)"

# ---- download ------------------------------------------------------------------------------
$(addprefix $(WMT_DL)/,$(WMT_ARCHIVES)):
	@$(FETCH) $(@F) || { printf '%s\n' $(WMT_HELP) >&2; exit 1; }
.SECONDARY: $(addprefix $(WMT_DL)/,$(WMT_ARCHIVES))

download: $(addprefix $(WMT_DL)/,$(WMT_ARCHIVES))

# $(call locked,TMP,FILE...): shell code that holds the lock of TMP, the first temporary
# file that the recipe writes, for the rest of the recipe (lock-file.sh, as wmt14-fetch.sh
# does for an archive's .part), so that two runs sharing WMT14_DIR take turns rather than
# writing the same temporary files at once; the second finds the FILEs made, and stops
# there.  The lock is of the files, not of the directory: the training text and the test
# set, two jobs of one make -j, are made side by side.  TMP is emptied, never removed,
# before it is written: removed, it would no longer be the file another run waits on.
locked = . $(PIPE_ROOT)/pipelines/lock-file.sh; lock_file $(1) $(1) "making $(2)"; \
    ready=1; for f in $(2); do [ -e $$f ] || ready=; done; \
    if [ -n "$$ready" ]; then rm -f $(1); echo "$(2): made by the other run"; exit 0; fi

# ---- training corpus: both sides at once, a corpus at a time, its line counts compared ---
%/train.en %/train.$(L2): | $(addprefix $(WMT_DL)/,$(WMT_TRAIN_ARCHIVES))
	@$(FETCH) $(WMT_TRAIN_ARCHIVES)
	@$(call locked,$*/train.en.tmp,$*/train.en $*/train.$(L2)); \
	: > $*/train.en.tmp; rm -f $*/train.$(L2).tmp; \
	for c in $(WMT14_CORPORA); do \
	    a=$(WMT_DL)/$${c%%:*}; m=$${c#*:}; \
	    n1=$$(tar -xOf $$a "$${m//@/en}" | zcat -f | tee -a $*/train.en.tmp | wc -l); \
	    n2=$$(tar -xOf $$a "$${m//@/$(L2)}" | zcat -f | tee -a $*/train.$(L2).tmp | wc -l); \
	    if [ $$n1 -ne $$n2 ]; then \
	        echo "$(MAKEFILE_NAME): $$a: $${m//@/en} has $$n1 lines, $${m//@/$(L2)} $$n2" >&2; \
	        exit 1; fi; \
	    echo "$*/train: $$n1 pairs from $$a ($${m//@/*})"; \
	done; \
	mv $*/train.$(L2).tmp $*/train.$(L2); mv $*/train.en.tmp $*/train.en

# ---- test set: the segments of the SGML, whitespace runs made one space, ends trimmed ------
SGM_TEXT = perl -CSD -ne 's{^<seg[^>]*>(.*)</seg>.*}{$$1}s or next; s/\s+/ /g; s/^ | $$//g; print "$$_\n"'

%/newstest2014.en %/newstest2014.$(L2): | $(WMT_DL)/dev.tgz
	@$(FETCH) dev.tgz
	@$(call locked,$*/newstest2014.en.tmp,$*/newstest2014.en $*/newstest2014.$(L2)); \
	tar -xOf $(WMT_DL)/dev.tgz $(WMT_TEST_EN) | $(SGM_TEXT) > $*/newstest2014.en.tmp; \
	tar -xOf $(WMT_DL)/dev.tgz $(WMT_TEST_L2) | $(SGM_TEXT) > $*/newstest2014.$(L2).tmp; \
	n1=$$(wc -l < $*/newstest2014.en.tmp); n2=$$(wc -l < $*/newstest2014.$(L2).tmp); \
	if [ $$n1 -ne $$n2 ] || [ $$n1 -eq 0 ]; then \
	    echo "$(MAKEFILE_NAME): $(WMT_DL)/dev.tgz: $(WMT_TEST_EN) has $$n1 segments, $(WMT_TEST_L2) $$n2" >&2; \
	    exit 1; fi; \
	echo "$*/newstest2014: $$n1 segments from $(WMT_DL)/dev.tgz ($(WMT_TEST_EN), $(WMT_TEST_L2))"; \
	mv $*/newstest2014.$(L2).tmp $*/newstest2014.$(L2); mv $*/newstest2014.en.tmp $*/newstest2014.en

# ---- the score: sacreBLEU and the paper's BLEU, each under its label ----------------------
OWN_SCORE := 1
EXTRA_MADE += test.tgt.tok test.hyp.tok
paper_tok = $(or $(PAPER_TOK),perl $(PIPE_ROOT)/pipelines/tokenize-13a.pl)
paper_how = $(if $(PAPER_TOK),tokenized by '$(PAPER_TOK)',tokenized by the mteval-v13a rules \
            (pipelines/tokenize-13a.pl), not by Moses's tokenizer.perl)

# Both score the text of the hypotheses, test.hyp.txt; test.{hyp,tgt}.tok are the
# tokenized text that the paper's BLEU counts (hyphens not yet split).
settings.score = SCORE_FLAGS=$(SCORE_FLAGS) PAPER_TOK=$(PAPER_TOK)
$(W)/score.txt: $(W)/test.hyp.txt $(W)/test.tgt $(W)/settings/score | $(BIN)/tfm-score
	$(paper_tok) < $(W)/test.tgt > $(W)/test.tgt.tok
	$(paper_tok) < $(W)/test.hyp.txt > $(W)/test.hyp.tok
	@n=$$(wc -l < $(W)/test.tgt); \
	{ echo "sacreBLEU, detokenized text ($$n sentences of $(TEST_TGT)):"; \
	  $(TFM)score -r $(W)/test.tgt $(SCORE_FLAGS) $<; \
	  echo "paper's BLEU, $(paper_how); hyphens split as ##AT##-##AT## (tensor2tensor's get_ende_bleu.sh), multi-bleu.perl's BLEU:"; \
	  $(TFM)score --tokenized --compound-split -r $(W)/test.tgt.tok $(W)/test.hyp.tok; \
	} > $@.tmp; mv $@.tmp $@
	@$(if $(score_goal),:,cat $@)

.PHONY: download
