#include "drivers/ethdev/runtime_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

namespace droce::ethdev {
namespace {

bool Exists(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0;
}

class RuntimeDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/droce-runtime-dir-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    base_ = tmpl;
  }
  void TearDown() override {
    if (child_ > 0) {
      kill(child_, SIGKILL);
      waitpid(child_, nullptr, 0);
    }
    (void)!system(("rm -rf " + base_).c_str());
  }
  // A runtime directory as DPDK leaves it: config, an fbarray, a socket
  // name; `age_s` seconds old.
  std::string MakeDir(const std::string& name, int age_s, bool with_config = true) {
    const std::string dir = base_ + "/" + name;
    EXPECT_EQ(mkdir(dir.c_str(), 0700), 0);
    if (with_config) std::ofstream(dir + "/config") << std::string(4096, '\0');
    std::ofstream(dir + "/fbarray_memzone") << "x";
    const time_t when = time(nullptr) - age_s;
    utimbuf t{when, when};
    EXPECT_EQ(utime(dir.c_str(), &t), 0);
    return dir;
  }
  // Another process holds a write lock on part of dir/config, as a running
  // DPDK primary does.
  void LockFromAnotherProcess(const std::string& dir) {
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    child_ = fork();
    ASSERT_GE(child_, 0);
    if (child_ == 0) {
      const int fd = open((dir + "/config").c_str(), O_RDWR);
      struct flock part {};
      part.l_type = F_WRLCK;
      part.l_whence = SEEK_SET;
      part.l_start = 128;
      part.l_len = 256;
      if (fd < 0 || fcntl(fd, F_SETLK, &part) != 0) _exit(1);
      (void)!write(ready[1], "k", 1);
      pause();
      _exit(0);
    }
    char c;
    ASSERT_EQ(read(ready[0], &c, 1), 1);
    close(ready[0]);
    close(ready[1]);
  }
  std::string base_;
  pid_t child_ = -1;
};

TEST_F(RuntimeDirTest, RemovesOnlyOldUnlockedDroceDirectories) {
  const std::string stale = MakeDir("droce-droce0-1111", 3600);
  const std::string no_config = MakeDir("droce-droce1-2222", 3600, /*with_config=*/false);
  const std::string running = MakeDir("droce-droce0-3333", 3600);
  LockFromAnotherProcess(running);
  const std::string starting = MakeDir("droce-droce1-4444", 0);
  const std::string daemon = MakeDir("droced-0aaefe50", 3600);
  const std::string not_ours = MakeDir("rte", 3600);
  const std::string not_ours_either = MakeDir("droceX", 3600);
  EXPECT_EQ(RemoveStaleRuntimeDirs(base_, 60), 3);
  EXPECT_FALSE(Exists(daemon));
  EXPECT_TRUE(Exists(not_ours_either + "/config"));
  EXPECT_FALSE(Exists(stale));
  EXPECT_FALSE(Exists(no_config));
  EXPECT_TRUE(Exists(running + "/config")) << "a live process's directory was removed";
  EXPECT_TRUE(Exists(starting + "/config")) << "a starting process's directory was removed";
  EXPECT_TRUE(Exists(not_ours + "/config")) << "a directory droce did not make was removed";
}

TEST_F(RuntimeDirTest, NoBaseDirectoryIsNotAnError) {
  EXPECT_EQ(RemoveStaleRuntimeDirs(base_ + "/absent", 0), 0);
}

TEST_F(RuntimeDirTest, RootUsesVarRun) {
  if (geteuid() != 0) GTEST_SKIP() << "not root";
  EXPECT_EQ(DpdkRuntimeBase(), "/var/run/dpdk");
}

}  // namespace
}  // namespace droce::ethdev
