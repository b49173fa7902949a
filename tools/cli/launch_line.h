// How to run this program again, for the lines the tool prints as "run this next" and for the
// processes it launches itself: the name it was started by, shell quoting, and `mpirun -np N` when
// the run needs one process per rank.
#pragma once

#include <string>

namespace pf::cli {

// Called once by run() with argv[0].
void remember_invocation(const char* argv0);
// The command that starts this program from the current folder: argv[0] as typed when it names a
// path ("bazel-bin/pipeforge"), else the name found on the PATH ("pipeforge").
std::string this_command();
// `s` quoted for a POSIX shell when it holds anything but [A-Za-z0-9_./:=@%+,-].
std::string shell_quote_if_needed(const std::string& s);
// `s` in single quotes, always.
std::string shell_quote(const std::string& s);
// The executable file `name` in a folder of $PATH; "" when there is none.
std::string find_on_path(const std::string& name);
// "<this command> <arguments>", or "mpirun -np N <this command> <arguments>" for N > 1 processes,
// preceded by the variables Open MPI needs to start as root when running as root, with
// --oversubscribe when N is more than this machine's physical cores (Open MPI would refuse).
std::string launch_line(int processes, const std::string& arguments);
// The physical cores of this machine (/proc/cpuinfo; the hardware threads when it does not say).
int physical_cores();
// True when this process runs as root (Open MPI then refuses to start without being told).
bool running_as_root();
// As root, the variables that let Open MPI start ("OMPI_ALLOW_RUN_AS_ROOT=1 ... ", ending in a
// space) to put before a shell's mpirun command; "" otherwise. Other MPIs ignore them.
std::string mpirun_root_variables();

}  // namespace pf::cli
