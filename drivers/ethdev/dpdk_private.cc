#include "drivers/ethdev/dpdk_private.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <rte_ethdev.h>
#include <rte_version.h>

namespace droce::ethdev::dpdk_private {
namespace {
constexpr size_t kEthDevDataRxQueuesOffset = RTE_ETH_NAME_MAX_LEN;  // rte_eth_dev_data::rx_queues
}  // namespace

const uint8_t* EthDev(uint16_t port, std::string* why_not) {
  void* base = dlsym(RTLD_DEFAULT, "rte_eth_devices");
  if (base == nullptr) {
    *why_not = "rte_eth_devices not found";
    return nullptr;
  }
  Dl_info info;
  ElfW(Sym)* sym = nullptr;
  if (dladdr1(base, &info, reinterpret_cast<void**>(&sym), RTLD_DL_SYMENT) == 0 || sym == nullptr ||
      sym->st_size % RTE_MAX_ETHPORTS != 0) {
    *why_not = "rte_eth_devices has an unexpected size";
    return nullptr;
  }
  const size_t stride = sym->st_size / RTE_MAX_ETHPORTS;
  const uint8_t* dev = static_cast<const uint8_t*>(base) + size_t{port} * stride;
  // The layout is right if the device's burst function and first RX queue
  // are the ones the public fast-path table holds for this port.
  const struct rte_eth_fp_ops& fp = ::rte_eth_fp_ops[port];
  const auto* data = Load<const uint8_t*>(dev, kEthDevDataOffset);
  if (Load<void*>(dev, 0) != reinterpret_cast<void*>(fp.rx_pkt_burst) || data == nullptr) {
    *why_not = "rte_eth_dev layout differs from DPDK 22.11's";
    return nullptr;
  }
  char name[RTE_ETH_NAME_MAX_LEN];
  void** rx_queues = Load<void**>(data, kEthDevDataRxQueuesOffset);
  if (rte_eth_dev_get_name_by_port(port, name) != 0 || std::strncmp(name, reinterpret_cast<const char*>(data),
                                                                    RTE_ETH_NAME_MAX_LEN) != 0 ||
      rx_queues == nullptr || rx_queues[0] != fp.rxq.data[0]) {
    *why_not = "rte_eth_dev_data layout differs from DPDK 22.11's";
    return nullptr;
  }
  return dev;
}

const uint8_t* MemifEthDev(uint16_t port, bool rx, std::string* why_not) {
  std::string unused;
  if (why_not == nullptr) why_not = &unused;
  if (std::strncmp(rte_version(), "DPDK 22.11", 10) != 0) {
    *why_not = std::string("built for DPDK 22.11's PMD layouts, running ") + rte_version();
    return nullptr;
  }
  rte_eth_dev_info info;
  if (rte_eth_dev_info_get(port, &info) != 0 || info.driver_name == nullptr) {
    *why_not = "no such port";
    return nullptr;
  }
  if (std::strcmp(info.driver_name, "net_memif") != 0) {
    *why_not = std::string(info.driver_name) + " is not net_memif";
    return nullptr;
  }
  const void* queue = rx ? ::rte_eth_fp_ops[port].rxq.data[0] : ::rte_eth_fp_ops[port].txq.data[0];
  if (queue == nullptr) {
    *why_not = rx ? "RX queue 0 is not set up" : "TX queue 0 is not set up";
    return nullptr;
  }
  const uint8_t* dev = EthDev(port, why_not);
  if (dev == nullptr) return nullptr;
  if (Load<uint32_t>(queue, kMemifQueueTypeOffset) > kMemifRingS2C ||
      Load<uint16_t>(queue, kMemifQueueInPortOffset) != port) {
    *why_not = "memif queue layout differs from DPDK 22.11's";
    return nullptr;
  }
  return dev;
}

}  // namespace droce::ethdev::dpdk_private
