/* Program records for --record and s1-replay: each program's encoded bytes and its result's
 * encoded bytes, side by side in one directory, numbered in run order. The bytes are the proto
 * messages themselves, so a replay decodes exactly what the executor received. */
#ifndef S1_EX_RECORD_H
#define S1_EX_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "cm_error.h"

/* Writes DIR/<seq>.program.msgpack and DIR/<seq>.result.msgpack (seq zero-padded to 8 digits),
 * each through a temporary file and rename, so a reader never sees half a record.
 * Returns 0 or -errno with diag naming the file. */
int ex_record_write(const char *dir, uint64_t seq, const void *program, size_t n_program,
                    const void *result, size_t n_result, struct cm_diag *diag);

/* Lists the record sequence numbers in DIR, ascending: the files named as ex_record_write names
 * a result (the canonical number, at least 8 digits, then ".result.msgpack"); nothing else in DIR
 * is a record. Ownership: *ret_seqs heap (free()). Returns 0 or -errno with diag. */
int ex_record_list(const char *dir, uint64_t **ret_seqs, size_t *ret_n, struct cm_diag *diag);

/* The number the next record of DIR gets: one past its highest, 0 when it holds none (an
 * executor restarted on the same --record DIR continues it, overwriting nothing).
 * Returns 0 or ex_record_list's error. */
int ex_record_next(const char *dir, uint64_t *ret_seq, struct cm_diag *diag);

/* Reads one record's files: its program, and its result unless ret_result is NULL. Only regular
 * files are read. Ownership: *ret_program, *ret_result heap (free()).
 * Returns 0 or -errno / -CM_EFORMAT (not a regular file) / -CM_ELIMIT (over 4 GiB) with diag. */
int ex_record_read(const char *dir, uint64_t seq, char **ret_program, size_t *ret_n_program,
                   char **ret_result, size_t *ret_n_result, struct cm_diag *diag);

#endif
