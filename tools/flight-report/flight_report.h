// Reads every rank's flight record (rank<r>.json, written by the engine on an
// error, a stall or SIGUSR1) and says which rank is behind and on which tensor.
// Used by `kolo-flight-report DIR` and by kolorun when a job fails.
#pragma once

#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace kolo::flight {

// What a job reads: the records written since it started. Older ones, left in a
// directory the user keeps (KOLO_FLIGHT_RECORDER_DIR) by an earlier job, are
// another job's. The default takes every record.
using WrittenSince = std::filesystem::file_time_type;

// The rank files (rank<r>.json) in `dir`, sorted; `error` set when `dir` cannot
// be read (it does not exist: the job kept no flight record).
std::vector<std::filesystem::path> record_files(const std::string& dir, std::error_code& error,
                                                WrittenSince since = WrittenSince::min());

// The report for the records in `dir` of a job of `size` ranks (0: infer from the
// records). Never throws: unreadable files are named in the report.
std::string report_for_directory(const std::string& dir, int size = 0, WrittenSince since = WrittenSince::min());

// The same from the files' contents, one string per rank file (for tests).
std::string report_for_records(const std::vector<std::string>& rank_json, int size);

// The rank that rank `rank`'s record in `dir` says it failed because of ("blames",
// written when a peer's failure ended it), or -1: no such record or field.
// Never throws.
int blamed_rank(const std::string& dir, int rank, WrittenSince since = WrittenSince::min());
// Why `rank`'s record was written (its "reason"), or empty when there is none.
std::string record_reason(const std::string& dir, int rank, WrittenSince since = WrittenSince::min());

}  // namespace kolo::flight
