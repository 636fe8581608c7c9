# pipelines/wmt_ende.mk: English-German translation as in Vaswani et al. (2017), stage by
# stage as make rules over real files (common.mk), so an interrupted run continues:
#   make -f pipelines/wmt_ende.mk                      the bundled Multi30k, tiny model, CPU
#   make -f pipelines/wmt_ende.mk CORPUS=toy           the bundled 10k-pair WMT sample
#   make -f pipelines/wmt_ende.mk CORPUS=wmt14         WMT14 from the WMT archives (wmt14.mk),
#                                      or WMT14_DIR; the base model, or CONFIG=configs/big.conf
#   make -f pipelines/wmt_ende.mk help                 the variables

MAKEFILE_NAME := wmt_ende.mk
PIPE_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))..)
# make splits a name at spaces: in a directory whose path has one, PIPE_ROOT is wrong.
$(if $(wildcard $(PIPE_ROOT)/pipelines/common.mk),,$(error $(MAKEFILE_NAME): cannot find \
    pipelines/common.mk beside '$(MAKEFILE_LIST)': make cannot read a path with a space))
BIN       ?= $(PIPE_ROOT)/bin
DATA      ?= $(PIPE_ROOT)/data

CORPUS    ?= multi30k
W         ?= work/wmt_ende-$(CORPUS)
# The tiny model on the bundled corpora (a CPU's job, MAX_TIME below); the paper's base
# model on WMT14, trained for its 100K updates (configs/base.conf, max_steps).
CONFIG    ?= $(PIPE_ROOT)/configs/$(if $(filter wmt14,$(CORPUS)),base,tiny).conf
WMT14_DIR ?= wmt14-ende

ifeq ($(CORPUS),multi30k)
# Multi30k task 1: 29k image captions; val for validation, test_2017_flickr for the score.
M := $(DATA)/multi30k-ende
TRAIN_SRC ?= $(M)/train.en.gz
TRAIN_TGT ?= $(M)/train.de.gz
VALID_SRC ?= $(M)/val.en.gz
VALID_TGT ?= $(M)/val.de.gz
TEST_SRC  ?= $(M)/test_2017_flickr.en.gz
TEST_TGT  ?= $(M)/test_2017_flickr.de.gz
MAX_TIME  ?= 20m
SAVE_EVERY ?= 1m
else ifeq ($(CORPUS),toy)
# OpenNMT's toy EN-DE: 10k WMT training pairs; src-val/tgt-val are newstest2012, whose
# lines 1-500 are the test set here and lines 501-1500 the validation set.  The text is
# Moses-tokenized and HTML-escaped (&apos; &quot; &amp;): PREP unescapes it, so that the
# model and BLEU see ' " & as written.  BLEU is then sacreBLEU's on tokenized text.
T := $(DATA)/onmt-toy-ende
TRAIN_SRC ?= $(T)/src-train.txt
TRAIN_TGT ?= $(T)/tgt-train.txt
VALID_SRC ?= $(T)/src-val.txt
VALID_TGT ?= $(T)/tgt-val.txt
TEST_SRC  ?= $(T)/src-val.txt
TEST_TGT  ?= $(T)/tgt-val.txt
VALID_SEL := 501,1500p
TEST_SEL  := 1,500p
PREP      := sed -e "s/&apos;/'/g; s/&quot;/\"/g; s/&lt;/</g; s/&gt;/>/g" \
                 -e 's/&\#91;/[/g; s/&\#93;/]/g; s/&\#124;/|/g; s/&amp;/\&/g'
MAX_TIME  ?= 20m
SAVE_EVERY ?= 1m
else ifeq ($(CORPUS),wmt14)
# WMT14 EN-DE: Europarl v7, Common Crawl and News Commentary v9 (4.5 million pairs),
# downloaded and prepared by wmt14.mk unless WMT14_DIR holds them already; pairs cleaned by
# their length in pieces (CLEAN_LEN, CLEAN_RATIO); newstest2013 (bundled) validates,
# newstest2014 is the test, scored twice (sacreBLEU and the paper's tokenized BLEU).
# The paper: shared BPE of about 37000 pieces, checkpoints every 10 minutes, last 5 averaged.
L2 := de
WMT14_CORPORA := training-parallel-europarl-v7.tgz:training/europarl-v7.de-en.@ \
                 training-parallel-commoncrawl.tgz:commoncrawl.de-en.@ \
                 training-parallel-nc-v9.tgz:training/news-commentary-v9.de-en.@
TRAIN_SRC ?= $(WMT14_DIR)/train.en
TRAIN_TGT ?= $(WMT14_DIR)/train.de
VALID_SRC ?= $(DATA)/newstest2013/newstest2013.en
VALID_TGT ?= $(DATA)/newstest2013/newstest2013.de
TEST_SRC  ?= $(WMT14_DIR)/newstest2014.en
TEST_TGT  ?= $(WMT14_DIR)/newstest2014.de
VOCAB     ?= 37000
SAVE_EVERY ?= 10m
DATA_HELP = "CORPUS=wmt14 reads the files that TRAIN_SRC, TRAIN_TGT, TEST_SRC and TEST_TGT name:" \
    "  the training corpus, parallel lines, plain or gzip; the test set as plain text." \
    "Left unset, they are train.{en,de} and newstest2014.{en,de} in WMT14_DIR=$(WMT14_DIR)," \
    "made from the WMT archives when missing."
else
$(error $(MAKEFILE_NAME): CORPUS=$(CORPUS): use multi30k, toy or wmt14)
endif
DATA_HELP ?= "The bundled corpus comes with the tfm sources: is DATA=$(DATA) right?"
HELP_CORPUS = "CORPUS=$(CORPUS)  multi30k (bundled, default), toy (bundled WMT sample) or wmt14" \
    "WMT14_DIR=$(WMT14_DIR)  train.{en,de}, newstest2014.{en,de} for CORPUS=wmt14, made when missing" \
    $(if $(L2),$(WMT_HELP_VARS))

all: $(W)/score.txt $(W)/test.hyp.txt

ifeq ($(CORPUS),wmt14)
include $(PIPE_ROOT)/pipelines/wmt14.mk
endif
include $(PIPE_ROOT)/pipelines/common.mk
