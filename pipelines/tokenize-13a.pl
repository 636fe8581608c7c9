#!/usr/bin/env perl
# pipelines/tokenize-13a.pl: UTF-8 text on stdin, a sentence a line, tokenized on stdout
# by the rules of mteval-v13a, sacreBLEU's default tokenizer (tfm-score --tok 13a, whose
# manual states them): the tokens tfm-score counts, written out, for the paper's tokenized
# BLEU (tfm-score --tokenized --compound-split).  It is not Moses's tokenizer.perl: it
# splits off fewer characters (no apostrophes, no hyphens between letters) and escapes
# nothing.
# Input that is not UTF-8 is refused (exit status 1, naming the line), as tfm-score
# refuses it: read through Perl's lax decoding layer, a byte \xFF became the text "\xFF",
# two tokens more than the reference has.
use strict;
use warnings;
use Encode qw(decode encode);

# A file named as an operand would not be read (the text comes on stdin): said, rather than
# waiting for a terminal's input.
if (@ARGV) {
    print STDERR "usage: tokenize-13a.pl < TEXT > TOKENS\n";
    exit 2;
}

binmode STDIN, ':raw';
binmode STDOUT, ':raw';

# Python's str.split() and str.rstrip() take \x1c-\x1f for whitespace too; Perl's \s
# does not.
my $ws = qr/[\s\x1c-\x1f]/;

while (my $bytes = <STDIN>) {
    my $line = eval { decode('UTF-8', $bytes, Encode::FB_CROAK) };
    if (!defined $line) {
        print STDERR "tokenize-13a: standard input: line $.: invalid UTF-8\n";
        exit 1;
    }
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
    print encode('UTF-8', join(' ', grep { length } split /$ws+/, $line)), "\n"
        or last;
}
# a failed write (a full disk) is said, not left to a warning of the encoder
if (!close STDOUT) {
    print STDERR "tokenize-13a: standard output: $!\n";
    exit 1;
}
