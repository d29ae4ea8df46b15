// `kolorun --remote-exec`: the far end of a remote rank, started by ssh or a
// launcher command on the rank's host. It reads the rank's spec from stdin, starts
// the rank in its own process group (sharing this process's stdout and stderr, so
// its output flows back through ssh), then watches stdin: heartbeats, signals to
// deliver, and the end of the stream. The rank's whole process group is killed
// when kolorun goes quiet for longer than the host timeout, when stdin ends (ssh
// lost, kolorun killed), or when the rank's main process exits. Exits with the
// rank's status (128+signal when it was killed).
#pragma once

namespace kolorun {

int run_remote_exec();

}  // namespace kolorun
