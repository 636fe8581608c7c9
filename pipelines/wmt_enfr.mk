# pipelines/wmt_enfr.mk: English-French translation as in Vaswani et al. (2017): the big
# model (configs/big-enfr.conf), a shared 32000-piece word-piece vocabulary (SentencePiece's
# unigram model), newstest2013 (bundled) for validation, newstest2014 for the score, the
# last 20 checkpoints averaged.  The WMT14 EN-FR corpus (Europarl v7, Common Crawl, News
# Commentary v9, UN, Giga-FrEn: about 40.8 million pairs before cleaning) is not bundled:
# wmt14.mk downloads and prepares it, unless WMT14_DIR holds it already.
#   make -f pipelines/wmt_enfr.mk                     download, prepare, train, score
#   make -f pipelines/wmt_enfr.mk download            the archives only
#   make -f pipelines/wmt_enfr.mk WMT14_DIR=DIR       ready files
#   make -f pipelines/wmt_enfr.mk help
# The other stages are those of wmt_ende.mk (common.mk).

MAKEFILE_NAME := wmt_enfr.mk
PIPE_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))..)
# make splits a name at spaces: in a directory whose path has one, PIPE_ROOT is wrong.
$(if $(wildcard $(PIPE_ROOT)/pipelines/common.mk),,$(error $(MAKEFILE_NAME): cannot find \
    pipelines/common.mk beside '$(MAKEFILE_LIST)': make cannot read a path with a space))
BIN       ?= $(PIPE_ROOT)/bin
DATA      ?= $(PIPE_ROOT)/data

W         ?= work/wmt_enfr
CONFIG    ?= $(PIPE_ROOT)/configs/big-enfr.conf
WMT14_DIR ?= wmt14-enfr
L2 := fr
WMT14_CORPORA := training-parallel-europarl-v7.tgz:training/europarl-v7.fr-en.@ \
                 training-parallel-commoncrawl.tgz:commoncrawl.fr-en.@ \
                 training-parallel-nc-v9.tgz:training/news-commentary-v9.fr-en.@ \
                 training-parallel-un.tgz:un/undoc.2000.fr-en.@ \
                 training-giga-fren.tar:giga-fren.release2.fixed.@.gz
TRAIN_SRC ?= $(WMT14_DIR)/train.en
TRAIN_TGT ?= $(WMT14_DIR)/train.fr
VALID_SRC ?= $(DATA)/newstest2013/newstest2013.en
VALID_TGT ?= $(DATA)/newstest2013/newstest2013.fr
TEST_SRC  ?= $(WMT14_DIR)/newstest2014.en
TEST_TGT  ?= $(WMT14_DIR)/newstest2014.fr
VOCAB     ?= 32000
SPM_TYPE  ?= unigram
SAVE_EVERY ?= 10m
AVG       ?= 20

DATA_HELP = "wmt_enfr.mk reads the files that TRAIN_SRC, TRAIN_TGT, TEST_SRC and TEST_TGT name:" \
    "  the training corpus, parallel lines, plain or gzip; the test set as plain text." \
    "Left unset, they are train.{en,fr} and newstest2014.{en,fr} in WMT14_DIR=$(WMT14_DIR)," \
    "made from the WMT archives when missing."
HELP_CORPUS = "WMT14_DIR=$(WMT14_DIR)  train.{en,fr}, newstest2014.{en,fr}, made when missing; newstest2013 is bundled" \
    $(WMT_HELP_VARS)

all: $(W)/score.txt $(W)/test.hyp.txt

include $(PIPE_ROOT)/pipelines/wmt14.mk
include $(PIPE_ROOT)/pipelines/common.mk
