/* treecon.h: searching only for well-formed linearized trees over the source's words.
 *
 * A parser trained on linearized trees (tfm-score --linearize: "(S (NP the cat )NP (VP
 * sat )VP )S") writes brackets and leaves, and nothing in the model forces what it writes
 * to be a tree over exactly the words it read.  A small model trained on little data
 * drops words and leaves brackets open.  The tree constraint wraps a step model (beam.h)
 * and gives -inf to every next token that could not lead to such a tree, so the search
 * (beam, greedy or sampling) only ever finishes trees:
 *  - the pieces of the vocabulary are classified once: an opening bracket is a piece
 *    "▁(" + label whose closing piece "▁)" + label exists, a closing bracket is "▁)" +
 *    label, a leaf begins with a piece that starts with "▁" (SentencePiece's word start)
 *    and goes on with pieces that do not; special pieces (pad, unk, bos, eos) are none;
 *  - one root: the first token opens it, and after it closes only eos may follow;
 *  - a closing bracket closes the innermost open one, with the same label, and only when
 *    that constituent holds at least one leaf;
 *  - leaves: TFM_TREE_COPY: the leaves spell the source's pieces in order (eos excluded),
 *    so that the model only chooses the brackets (targets with the words in place); which
 *    word comes is given, so a word's first piece gets the probability of every word start
 *    together (the model's belief that a leaf comes, whichever) and the rest of the word
 *    probability 1: a model unsure of where it is in the source does not flee into
 *    brackets; a source piece that is a bracket piece ("(NP" as a word) is copied as a
 *    leaf all the same (restoration will read it as a bracket: the Penn Treebank writes
 *    brackets in words as -LRB- and -RRB-);
 *    TFM_TREE_COUNT: any leaves, as many as the source has words (pieces starting with
 *    "▁"; an unknown piece, unk, continues its word), for targets with XX or POS tags in
 *    place of the words; a leaf is one that restoration reads as one: its text does not
 *    start with a bracket ("▁(" or "▁)" alone, or continued), and "▁" alone, which is
 *    no text, goes on with a piece that does not start with one;
 *  - eos only once the root is closed over every word; a bracket opens only while words
 *    remain and while the tokens left before the sentence's maximum length still suffice
 *    to close everything open (so the maximum length never cuts a tree), at most
 *    TFM_TREE_MAX_DEPTH deep and at most TFM_TREE_MAX_RUN in a row.
 *
 * Not here: the search (beam.c), the linearization and restoration (treebank.c).
 */
#ifndef TFM_TREECON_H
#define TFM_TREECON_H

#include <stdint.h>

#include "beam.h"
#include "error.h"
#include "spm.h"   /* the special ids */

enum tfm_tree_mode { TFM_TREE_OFF = 0, TFM_TREE_COPY = 1, TFM_TREE_COUNT = 2 };

#define TFM_TREE_MAX_DEPTH 64
/* Brackets opened in a row (no leaf or closing between them) at most: the Penn Treebank's
 * training trees open at most 6 so; a model lost in its search would open without end. */
#define TFM_TREE_MAX_RUN 8

struct tfm_treecon;

/* The constraint for a vocabulary of pieces[0..vocab) (tfm_spm_piece; NULL: none) in mode
 * (COPY or COUNT); ids 0-3 are pad, unk, bos, eos.  Fails when the vocabulary has no
 * bracket pair.  NULL with err. */
struct tfm_treecon *tfm_treecon_create(const char *const *pieces, int vocab,
                                       enum tfm_tree_mode mode, struct tfm_error *err);
void tfm_treecon_free(struct tfm_treecon *tc);

/* Start a search over B sources src (B,S) (padded with 0 after each sentence's eos) with
 * max_len[b] tokens at most before eos: *out becomes inner with the constraint applied (out
 * refers to tc and inner until the next begin).  0, or -1 with err. */
int tfm_treecon_begin(struct tfm_treecon *tc, const struct tfm_step_model *inner, int B, int S,
                      const int32_t *src, const int *max_len, struct tfm_step_model *out,
                      struct tfm_error *err);

/* "copy", "count" or "off"; and back (-1: no such mode). */
const char *tfm_tree_mode_name(enum tfm_tree_mode m);
int tfm_tree_mode_parse(const char *s);

#endif
