/* treebank.h: files of trees -- linearizing a treebank, printing its trees one a line,
 * and restoring trees from decoder output, as tfm-score --linearize, --oneline and
 * --restore do (tfm-score(1)).
 *
 * A treebank file holds trees that may span lines (.mrg) or one tree a line; errors name
 * the lines ("FILE: tree starting on line 2: line 3, column 26: reason").  Linearized
 * output (one sentence a line, or a hypothesis stream, as hypread.h reads it) is restored
 * with the words of a source file of as many lines.
 * Not here: parsing, linearizing and restoring one tree (tree.h), scoring (evalb.h).
 */
#ifndef TFM_TREEBANK_H
#define TFM_TREEBANK_H

#include <stdio.h>

#include "error.h"
#include "tree.h"

/* Write "WORDS<TAB>LINEARIZED\n" to out for each tree of path ("-": stdin). */
int tfm_treebank_linearize(const char *path, const struct tfm_linearize_opts *o, FILE *out,
                           struct tfm_error *err);

/* Write each tree of path ("-": stdin) on one line, as tfm_tree_format prints it: the
 * gold trees of a test set, line k for line k of tfm_treebank_linearize's output. */
int tfm_treebank_oneline(const char *path, FILE *out, struct tfm_error *err);

/* Write the tree restored (tfm_tree_restore, root label root) from each line of path
 * ("-" or NULL: stdin) and the same line of source to out, one a line. */
int tfm_treebank_restore(const char *path, const char *source, const char *root, FILE *out,
                         struct tfm_error *err);

#endif
