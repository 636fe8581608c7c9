# pipelines/paths.mk: the check of a pipeline's path variables, read before any rule names
# them (common.mk; wmt14.mk, whose rules name WMT_DL and WMT14_DIR before common.mk is read).
# Make splits a name at spaces, and an empty one names the root directory (W= would make
# the work files there).  Recipes name the paths unquoted, so characters of the shell's
# syntax, or of make's (% in a pattern, : # =), are refused too: WMT_DL='dl;x' would run x;
# and so is a path that begins with -, which mkdir, rm and the tools take for an option.

SYNTAX_CHARS := ' " ` $$ ; & | < > ( ) { } [ ] * ? ! \ \# % : =
# $(call check_paths,VAR...): stop, naming the variable, unless each VAR holds one path free
# of those characters.
check_paths = $(foreach v,$(1),$(if $(filter-out 1,$(words $($(v)))),$(error \
    $(MAKEFILE_NAME): $(v)='$($(v))': one path expected, without spaces (make splits names at them; several files: join them into one))))$(foreach \
    v,$(1),$(if $(filter -%,$($(v))),$(error \
    $(MAKEFILE_NAME): $(v)=$($(v)): a path that begins with -, which a command would read as an option ($(abspath $($(v))) names it))))$(foreach \
    v,$(1),$(foreach c,$(SYNTAX_CHARS),$(if $(findstring $(c),$($(v))),$(error \
    $(MAKEFILE_NAME): $(v)=$($(v)): $(c) in a path: the shell or make would read it as syntax))))
