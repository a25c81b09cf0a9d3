// libibverbs' private provider ABI, version IBVERBS_PRIVATE_34 (rdma-core 34
// to 44+; Debian 12 ships 44.0). Debian installs no <infiniband/driver.h>, so
// the structures a provider shares with libibverbs are declared here, field for
// field, in the order of rdma-core v44's libibverbs/driver.h. A wrong layout
// here corrupts memory silently, so every size and offset that can be checked
// against the public <infiniband/verbs.h> is static_asserted below, and
// verbs_context_ops is checked by counting its members (76 function pointers).
#ifndef DROCE_DRIVERS_VERBS_ABI_H_
#define DROCE_DRIVERS_VERBS_ABI_H_

#include <infiniband/verbs.h>
#include <sys/types.h>
#include <time.h>

#include <cstddef>
#include <cstdint>

extern "C" {

struct list_node {  // ccan/list.h
  list_node* next;
  list_node* prev;
};

enum verbs_match_kind : uint8_t {
  VERBS_MATCH_SENTINEL = 0,
  VERBS_MATCH_PCI = 1,
  VERBS_MATCH_MODALIAS = 2,
  VERBS_MATCH_DRIVER_ID = 3,
};

struct verbs_match_ent {
  void* driver_data;
  union {
    const char* modalias;
    uint64_t driver_id;
  } u;
  uint16_t vendor;
  uint16_t device;
  uint8_t kind;
};

struct verbs_sysfs_dev {
  list_node entry;
  void* provider_data;
  const verbs_match_ent* match;
  unsigned int flags;
  char sysfs_name[IBV_SYSFS_NAME_MAX];
  dev_t sysfs_cdev;
  char ibdev_name[IBV_SYSFS_NAME_MAX];
  char ibdev_path[IBV_SYSFS_PATH_MAX];
  char modalias[512];
  uint64_t node_guid;
  uint32_t driver_id;
  ibv_node_type node_type;
  int ibdev_idx;
  uint32_t num_ports;
  uint32_t abi_ver;
  timespec time_created;
};

struct verbs_device;
struct verbs_context;

struct verbs_device_ops {
  const char* name;
  uint32_t match_min_abi_version;
  uint32_t match_max_abi_version;
  const verbs_match_ent* match_table;
  const verbs_device_ops** static_providers;
  bool (*match_device)(verbs_sysfs_dev* sysfs_dev);
  verbs_context* (*alloc_context)(ibv_device* device, int cmd_fd, void* private_data);
  verbs_context* (*import_context)(ibv_device* device, int cmd_fd);
  verbs_device* (*alloc_device)(verbs_sysfs_dev* sysfs_dev);
  void (*uninit_device)(verbs_device* device);
};

struct verbs_device {
  ibv_device device;  // must be first
  const verbs_device_ops* ops;
  int refcount;  // atomic_int in C
  list_node entry;
  verbs_sysfs_dev* sysfs;
  uint64_t core_support;
};

enum ibv_mr_type { IBV_MR_TYPE_MR, IBV_MR_TYPE_NULL_MR, IBV_MR_TYPE_IMPORTED_MR, IBV_MR_TYPE_DMABUF_MR };

struct verbs_mr {
  ibv_mr ibv_mr;
  ibv_mr_type mr_type;
  int access;
};

enum verbs_qp_mask { VERBS_QP_XRCD = 1 << 0, VERBS_QP_EX = 1 << 1 };

struct verbs_xrcd;
struct verbs_qp {
  union {
    ibv_qp qp;
    ibv_qp_ex qp_ex;
  };
  uint32_t comp_mask;
  verbs_xrcd* xrcd;
};

struct verbs_cq {
  union {
    ibv_cq cq;
    ibv_cq_ex cq_ex;
  };
};

struct ibv_ece;
// The union of every op a provider may supply, sorted by name (driver.h).
struct verbs_context_ops {
  int (*advise_mr)(ibv_pd*, ibv_advise_mr_advice, uint32_t, ibv_sge*, uint32_t);
  ibv_dm* (*alloc_dm)(ibv_context*, ibv_alloc_dm_attr*);
  ibv_mw* (*alloc_mw)(ibv_pd*, ibv_mw_type);
  ibv_mr* (*alloc_null_mr)(ibv_pd*);
  ibv_pd* (*alloc_parent_domain)(ibv_context*, ibv_parent_domain_init_attr*);
  ibv_pd* (*alloc_pd)(ibv_context*);
  ibv_td* (*alloc_td)(ibv_context*, ibv_td_init_attr*);
  void (*async_event)(ibv_context*, ibv_async_event*);
  int (*attach_counters_point_flow)(ibv_counters*, ibv_counter_attach_attr*, ibv_flow*);
  int (*attach_mcast)(ibv_qp*, const ibv_gid*, uint16_t);
  int (*bind_mw)(ibv_qp*, ibv_mw*, ibv_mw_bind*);
  int (*close_xrcd)(ibv_xrcd*);
  void (*cq_event)(ibv_cq*);
  ibv_ah* (*create_ah)(ibv_pd*, ibv_ah_attr*);
  ibv_counters* (*create_counters)(ibv_context*, ibv_counters_init_attr*);
  ibv_cq* (*create_cq)(ibv_context*, int, ibv_comp_channel*, int);
  ibv_cq_ex* (*create_cq_ex)(ibv_context*, ibv_cq_init_attr_ex*);
  ibv_flow* (*create_flow)(ibv_qp*, ibv_flow_attr*);
  ibv_flow_action* (*create_flow_action_esp)(ibv_context*, ibv_flow_action_esp_attr*);
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*);
  ibv_qp* (*create_qp_ex)(ibv_context*, ibv_qp_init_attr_ex*);
  ibv_rwq_ind_table* (*create_rwq_ind_table)(ibv_context*, ibv_rwq_ind_table_init_attr*);
  ibv_srq* (*create_srq)(ibv_pd*, ibv_srq_init_attr*);
  ibv_srq* (*create_srq_ex)(ibv_context*, ibv_srq_init_attr_ex*);
  ibv_wq* (*create_wq)(ibv_context*, ibv_wq_init_attr*);
  int (*dealloc_mw)(ibv_mw*);
  int (*dealloc_pd)(ibv_pd*);
  int (*dealloc_td)(ibv_td*);
  int (*dereg_mr)(verbs_mr*);
  int (*destroy_ah)(ibv_ah*);
  int (*destroy_counters)(ibv_counters*);
  int (*destroy_cq)(ibv_cq*);
  int (*destroy_flow)(ibv_flow*);
  int (*destroy_flow_action)(ibv_flow_action*);
  int (*destroy_qp)(ibv_qp*);
  int (*destroy_rwq_ind_table)(ibv_rwq_ind_table*);
  int (*destroy_srq)(ibv_srq*);
  int (*destroy_wq)(ibv_wq*);
  int (*detach_mcast)(ibv_qp*, const ibv_gid*, uint16_t);
  void (*free_context)(ibv_context*);
  int (*free_dm)(ibv_dm*);
  int (*get_srq_num)(ibv_srq*, uint32_t*);
  ibv_dm* (*import_dm)(ibv_context*, uint32_t);
  ibv_mr* (*import_mr)(ibv_pd*, uint32_t);
  ibv_pd* (*import_pd)(ibv_context*, uint32_t);
  int (*modify_cq)(ibv_cq*, ibv_modify_cq_attr*);
  int (*modify_flow_action_esp)(ibv_flow_action*, ibv_flow_action_esp_attr*);
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int);
  int (*modify_qp_rate_limit)(ibv_qp*, ibv_qp_rate_limit_attr*);
  int (*modify_srq)(ibv_srq*, ibv_srq_attr*, int);
  int (*modify_wq)(ibv_wq*, ibv_wq_attr*);
  ibv_qp* (*open_qp)(ibv_context*, ibv_qp_open_attr*);
  ibv_xrcd* (*open_xrcd)(ibv_context*, ibv_xrcd_init_attr*);
  int (*poll_cq)(ibv_cq*, int, ibv_wc*);
  int (*post_recv)(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**);
  int (*post_send)(ibv_qp*, ibv_send_wr*, ibv_send_wr**);
  int (*post_srq_ops)(ibv_srq*, ibv_ops_wr*, ibv_ops_wr**);
  int (*post_srq_recv)(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**);
  int (*query_device_ex)(ibv_context*, const ibv_query_device_ex_input*, ibv_device_attr_ex*, size_t);
  int (*query_ece)(ibv_qp*, ibv_ece*);
  int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*);
  int (*query_qp)(ibv_qp*, ibv_qp_attr*, int, ibv_qp_init_attr*);
  int (*query_qp_data_in_order)(ibv_qp*, ibv_wr_opcode, uint32_t);
  int (*query_rt_values)(ibv_context*, ibv_values_ex*);
  int (*query_srq)(ibv_srq*, ibv_srq_attr*);
  int (*read_counters)(ibv_counters*, uint64_t*, uint32_t, uint32_t);
  ibv_mr* (*reg_dm_mr)(ibv_pd*, ibv_dm*, uint64_t, size_t, unsigned int);
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd*, uint64_t, size_t, uint64_t, int, int);
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, uint64_t, int);
  int (*req_notify_cq)(ibv_cq*, int);
  int (*rereg_mr)(verbs_mr*, int, ibv_pd*, void*, size_t, int);
  int (*resize_cq)(ibv_cq*, int);
  int (*set_ece)(ibv_qp*, ibv_ece*);
  void (*unimport_dm)(ibv_dm*);
  void (*unimport_mr)(ibv_mr*);
  void (*unimport_pd)(ibv_pd*);
};

// Exported by libibverbs.so.1 with symbol version IBVERBS_PRIVATE_34.
void verbs_register_driver_34(const verbs_device_ops* ops);
void* _verbs_init_and_alloc_context(ibv_device* device, int cmd_fd, size_t alloc_size,
                                    verbs_context* context_offset, uint32_t driver_id);
void verbs_uninit_context(verbs_context* context);
void verbs_set_ops(verbs_context* vctx, const verbs_context_ops* ops);

// The kernel's event records, which ibv_get_async_event / ibv_get_cq_event
// read from async_fd / a completion channel's fd (rdma/ib_user_verbs.h).
struct droce_async_event_desc {
  uint64_t element;  // the object's user handle: our ibv_cq* / ibv_qp* / ibv_srq*
  uint32_t event_type;
  uint32_t reserved;
};
struct droce_comp_event_desc {
  uint64_t cq_handle;  // the ibv_cq*
};

}  // extern "C"

// Layout checks against what the public header fixes.
static_assert(sizeof(list_node) == 16);
static_assert(offsetof(verbs_device, device) == 0);
static_assert(offsetof(verbs_device, ops) == sizeof(ibv_device));
static_assert(offsetof(verbs_device, sysfs) == sizeof(ibv_device) + 8 + 8 + 16);
static_assert(offsetof(verbs_sysfs_dev, sysfs_name) == 16 + 8 + 8 + 4);
static_assert(offsetof(verbs_sysfs_dev, ibdev_path) ==
              offsetof(verbs_sysfs_dev, ibdev_name) + IBV_SYSFS_NAME_MAX);
static_assert(offsetof(verbs_mr, mr_type) == sizeof(ibv_mr));
static_assert(offsetof(verbs_qp, comp_mask) == sizeof(ibv_qp_ex));
static_assert(offsetof(ibv_qp_ex, qp_base) == 0);
static_assert(sizeof(verbs_cq) == sizeof(ibv_cq_ex));
static_assert(sizeof(verbs_context_ops) == 76 * sizeof(void*));
static_assert(offsetof(verbs_context, context) + sizeof(ibv_context) == sizeof(verbs_context));
static_assert(sizeof(droce_async_event_desc) == 16);

#endif  // DROCE_DRIVERS_VERBS_ABI_H_
