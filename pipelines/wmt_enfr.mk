# pipelines/wmt_enfr.mk: English-French translation as in Vaswani et al. (2017): the big
# model (configs/big-enfr.conf), a shared 32000-piece word-piece vocabulary (SentencePiece's
# unigram model), newstest2013 (bundled) for validation, newstest2014 for the score, the
# last 20 checkpoints averaged.  The WMT14 EN-FR corpus (36M pairs) is not bundled:
#   make -f pipelines/wmt_enfr.mk WMT14_DIR=DIR
#   make -f pipelines/wmt_enfr.mk help
# The stages are those of wmt_ende.mk (common.mk).

MAKEFILE_NAME := wmt_enfr.mk
PIPE_ROOT := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))..)
BIN       ?= $(PIPE_ROOT)/bin
DATA      ?= $(PIPE_ROOT)/data

W         ?= work/wmt_enfr
CONFIG    ?= $(PIPE_ROOT)/configs/big-enfr.conf
WMT14_DIR ?= wmt14-enfr
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

DATA_HELP = "wmt_enfr.mk reads the WMT14 EN-FR data from WMT14_DIR=$(WMT14_DIR):" \
    "  train.en train.fr                the training corpus, parallel lines, plain or gzip" \
    "  newstest2014.en newstest2014.fr  the test set as plain text (from the SGML)" \
    "Put them there, or name them: TRAIN_SRC=... TRAIN_TGT=... TEST_SRC=... TEST_TGT=..."
HELP_CORPUS = "WMT14_DIR=$(WMT14_DIR)  train.{en,fr}, newstest2014.{en,fr}; newstest2013 is bundled"

all: $(W)/score.txt $(W)/test.hyp.txt

include $(PIPE_ROOT)/pipelines/common.mk
