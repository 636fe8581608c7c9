/* dump.h: any tfm stream as text, for tfm-cat and for people reading streams with
 * ordinary Unix tools.  The format is line-oriented and stable (see man/tfm-cat.1). */
#ifndef TFM_DUMP_H
#define TFM_DUMP_H

#include <stdio.h>

#include "error.h"
#include "stream.h"

#define TFM_DUMP_VALUES 1   /* print every element, a row of the last dimension a line */
#define TFM_DUMP_HEADER 2   /* print the header only (the records are still checked) */

/* Print r's header and records to out.  Returns 0, or -1 with err on a stream error or a
 * failed write. */
int tfm_dump(struct tfm_reader *r, FILE *out, int flags, struct tfm_error *err);

/* Widen one element of a 16-bit float type to float. */
float tfm_f16_to_f32(uint16_t h);
float tfm_bf16_to_f32(uint16_t h);

#endif
