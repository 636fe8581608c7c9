/* tree.h: Penn Treebank bracketed trees -- parsing, printing, and the linearization that
 * turns parsing into translation (Vinyals & Kaiser et al. 2014, "Grammar as a Foreign
 * Language"), with its inverse.
 *
 * Parsing accepts what treebanks and parsers write: a tree over several lines (.mrg) or
 * one line; the outer unlabeled bracket "( (S ...) )" (an empty label, kept as such);
 * "(TAG word)" preterminals, whitespace anywhere between tokens; several top-level trees
 * on one line (a forest, as EVALB reads a line).  A bracket holding a word beside other
 * children, a ')' with nothing open, a bracket left open, a word outside any bracket and
 * a NUL byte are errors naming the column.
 *
 * LINEARIZATION (the parse pipeline's target side), one token per space:
 *   (S (NP-SBJ (DT The) (NN cat)) (VP (VBD sat)) (. .))   source: The cat sat .
 *   -> (S (NP XX XX )NP (VP XX )VP XX )S
 *   - a constituent is "(LABEL" ... ")LABEL" (the closing token repeats the label);
 *   - a preterminal is "XX" (or its tag with keep_tags) and takes the next source word;
 *   - function tags and indices are stripped from phrase labels as EVALB strips them
 *     (NP-SBJ-1 -> NP, NP=2 -> NP; cut at the first '-' or '=' after the first character);
 *   - "-NONE-" preterminals (traces) are dropped, with every constituent left without
 *     words; the source side never contains trace words;
 *   - an outer wrapper (a top-level bracket labelled "", TOP or ROOT) is not written.
 * RESTORATION (decoder output + the source words -> one tree), one pass, left to right:
 *   - "(X" opens a constituent X (a bare "(" is dropped, and so is an opening that would
 *     nest brackets deeper than the parser reads, 4094 constituents, with as many of the
 *     closes that follow it);
 *   - ")..." closes the innermost open constituent, whatever label it carries (the
 *     opening token decides the label); with none open it is dropped; a close of the
 *     outermost open constituent while an opening token or a preterminal token still
 *     follows somewhere later is deferred: not applied, so the outermost constituent stays
 *     open and what follows goes inside it ("(S (NP XX )NP )S (VP XX )VP" -> one S over
 *     NP and VP, not two trees);
 *   - a label or tag ends at its first bracket ("(NP)" opens NP, "XX)" is a preterminal
 *     XX), so that the printed tree reads back as the same tree;
 *   - any other token is a preterminal: the tag is the token, the word is the next unused
 *     source word; when the source words are used up it is dropped; with no constituent
 *     open (before the first opening token), a root constituent labelled root is opened
 *     first, and what follows goes inside it ("XX (NP XX )NP" -> (S (XX a) (NP (XX b))));
 *   - at the end, unused source words are appended as (XX word) to the innermost open
 *     constituent, else (all closed) to the end of the top-level constituent, else (the
 *     output opened none: empty, only closes and bare "(") to a root constituent labelled
 *     root opened for them; constituents still open are closed; constituents without
 *     words are removed.
 *   So the restored tree always holds exactly the source words, in order, is balanced, and
 *   is a single tree: once a constituent is open the top level never gets a second one
 *   (an empty sentence gives an empty forest).  The first constituent the output opens is
 *   the root when it opens one before any preterminal, even when it is not S.
 *   For scoring, tfm_tree_restore_like also wraps the tree in the gold tree's outer
 *   wrapper when the gold has one.
 * Not here: scoring (evalb.h).  Library code: no printing.
 */
#ifndef TFM_TREE_H
#define TFM_TREE_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

struct tfm_tree_node {
    int32_t label;      /* offset in str of the label ("" for an unlabeled bracket) */
    int32_t word;       /* offset in str of a preterminal's word; -1 for a phrase */
    int32_t first;      /* first child, -1: none */
    int32_t next;       /* next sibling, -1: none */
};

struct tfm_tree {
    struct tfm_tree_node *nodes;
    int32_t n, cap;
    char *str;          /* NUL-terminated labels and words */
    size_t slen, scap;
    int32_t first;      /* first top-level node (siblings follow), -1: empty */
};

void tfm_tree_init(struct tfm_tree *t);
void tfm_tree_clear(struct tfm_tree *t);
void tfm_tree_free(struct tfm_tree *t);

static inline const char *tfm_tree_label(const struct tfm_tree *t, int32_t i)
{
    return t->str + t->nodes[i].label;
}
static inline const char *tfm_tree_word(const struct tfm_tree *t, int32_t i)
{
    return t->nodes[i].word < 0 ? NULL : t->str + t->nodes[i].word;
}

/* tfm_tree_parse's flags. */
#define TFM_TREE_ONE 1          /* stop after one top-level tree */
#define TFM_TREE_EMPTY_WORDS 2  /* "(X )" is a preterminal whose word is "", as EVALB reads
                                 * it (a label, whitespace, then ')'); without the flag it
                                 * is a constituent without children, like "(X)" */

/* Parse the top-level trees of text[*pos..len) into t (cleared first).  With TFM_TREE_ONE
 * in flags: stop after one top-level tree (for .mrg files, where trees span lines; *pos is
 * advanced past it and 0 is returned at the end of the text, 1 for a tree); else the whole
 * text is one forest (EVALB's line), and an empty text gives an empty forest.  -1 on
 * malformed input with "column C: reason" and *pos set to the offset of the problem in
 * text; C is counted from 1 on the problem's own line: from the last newline before it,
 * else from the start of text (not from *pos), so the caller of a text of many lines can
 * name the line. */
int tfm_tree_parse(struct tfm_tree *t, const char *text, size_t len, size_t *pos, int flags,
                   struct tfm_error *err);

/* The next tree of a text whose trees span lines (a .mrg file): tfm_tree_parse with one
 * set, its error naming the lines (counted from 1 in text): "tree starting on line 2:
 * column 7: reason", or "tree starting on line 2: line 5, column 7: reason" when the
 * problem is on a later line than the tree's start.  1, 0 at the end, or -1. */
int tfm_tree_parse_next(struct tfm_tree *t, const char *text, size_t len, size_t *pos,
                        struct tfm_error *err);

/* Print the forest as one line "(S (NP (DT The) (NN cat)) ...)", top-level trees separated
 * by a space, into (*out, *cap) realloc'd; returns the length or -1. */
int64_t tfm_tree_format(const struct tfm_tree *t, char **out, size_t *cap,
                        struct tfm_error *err);

/* Node n of t, or -1: the child of a single top-level wrapper ("", TOP or ROOT) when t is
 * one, else -1.  *label gets the wrapper's label. */
int32_t tfm_tree_wrapper(const struct tfm_tree *t, const char **label);

struct tfm_linearize_opts {
    int keep_tags;          /* preterminals as their tag instead of XX */
    int keep_function_tags; /* NP-SBJ stays NP-SBJ */
    int keep_words;         /* preterminals as their word instead of XX */
};

/* Source words (space-separated) and linearized target tokens (space-separated) of t,
 * into (*words, *wcap) and (*lin, *lcap), NUL-terminated. */
int tfm_tree_linearize(const struct tfm_tree *t, const struct tfm_linearize_opts *o,
                       char **words, size_t *wcap, char **lin, size_t *lcap,
                       struct tfm_error *err);

/* What restoration had to repair. */
struct tfm_restore_stats {
    int64_t dropped_close;  /* ')' with nothing open */
    int64_t dropped_tags;   /* preterminals beyond the source words */
    int64_t dropped_open;   /* bare "(" */
    int64_t added_words;    /* source words the output had no preterminal for */
    int64_t closed_at_end;  /* constituents left open (an opened root included) */
    int64_t removed_empty;  /* constituents without words */
    int64_t deferred_close; /* closes of the outermost constituent with more output after */
    int64_t opened_root;    /* roots opened because the output did not open one first */
};

/* The root label tfm-score uses when none is given. */
#define TFM_TREE_ROOT "S"

/* Restore one tree from linearized tokens lin[0..lin_len) and the source words
 * words[0..words_len) (both whitespace-separated), by the rule above; root labels the
 * root constituent restoration opens itself (NULL: TFM_TREE_ROOT).  Repairs are added to
 * *st (may be NULL).  Never fails on bad bracketing; -1 only when out of memory. */
int tfm_tree_restore(struct tfm_tree *t, const char *lin, size_t lin_len, const char *words,
                     size_t words_len, const char *root, struct tfm_restore_stats *st,
                     struct tfm_error *err);

/* Give the preterminals of t tagged only_tag ("XX"; NULL: all) the tags of the non-trace
 * preterminals of from, position by position, when both trees have the same number of
 * them.  Returns 1 when retagged, 0 when the numbers differ, -1 when out of memory.
 * tfm-score uses it on restored trees so that EVALB deletes the same punctuation in
 * gold and test: XX says nothing about punctuation, and neither does a word or a stray
 * label that an imperfect model writes where XX goes (so all preterminals by default;
 * only XX ones with --keep-tags, when the model predicts real tags). */
int tfm_tree_retag(struct tfm_tree *t, const struct tfm_tree *from, const char *only_tag,
                   struct tfm_error *err);

/* Wrap the forest of t in one node labelled label (an outer wrapper, e.g. "" or TOP). */
int tfm_tree_wrap(struct tfm_tree *t, const char *label, struct tfm_error *err);

/* A restored tree to score against gold: tfm_tree_restore (no stats), then gold's tags
 * (tfm_tree_retag with only_tag) and gold's outer wrapper, when gold has one and the
 * restored forest is not empty.  -1 only when out of memory. */
int tfm_tree_restore_like(struct tfm_tree *t, const char *lin, size_t lin_len,
                          const char *words, size_t words_len, const char *root,
                          const struct tfm_tree *gold, const char *only_tag,
                          struct tfm_error *err);

#endif
