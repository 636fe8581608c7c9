#!/usr/bin/env perl
# pipelines/tokenize-13a.pl: UTF-8 text on stdin, a sentence a line, tokenized on stdout
# by the rules of mteval-v13a, sacreBLEU's default tokenizer (tfm-score --tok 13a, whose
# manual states them): the tokens tfm-score counts, written out, for the paper's tokenized
# BLEU (tfm-score --tokenized --compound-split).  It is not Moses's tokenizer.perl: it
# splits off fewer characters (no apostrophes, no hyphens between letters) and escapes
# nothing.
use strict;
use warnings;

binmode STDIN, ':encoding(UTF-8)';
binmode STDOUT, ':encoding(UTF-8)';

# Python's str.split() and str.rstrip() take \x1c-\x1f for whitespace too; Perl's \s
# does not.
my $ws = qr/[\s\x1c-\x1f]/;

while (my $line = <STDIN>) {
    $line =~ s/\n\z//;
    $line =~ s/$ws+\z//;
    $line =~ s/<skipped>//g;
    $line =~ s/&quot;/"/g;
    $line =~ s/&amp;/&/g;
    $line =~ s/&lt;/</g;
    $line =~ s/&gt;/>/g;
    $line = " $line ";
    # the ASCII symbols and punctuation other than . , - ' split off everywhere
    $line =~ s/([{|}~\[\\\]^_`!"#\$%&()*+:;<=>?@\/])/ $1 /g;
    # a period or comma, unless between digits
    $line =~ s/([^0-9])([.,])/$1 $2 /g;
    $line =~ s/([.,])([^0-9])/ $1 $2/g;
    # a dash after a digit
    $line =~ s/([0-9])(-)/$1 $2 /g;
    print join(' ', grep { length } split /$ws+/, $line), "\n";
}
