// Included (clang -include) before each of shaders/amdgpu/*.cl when the tests compile it for the host:
// the AMDGPU builtins the kernels use become calls into the runner of amdgpu_host_run.cpp, which runs
// a workgroup's work-items as fibers of one thread. The kernels' logic (indexing, reductions, barriers, bounds)
// is then tested here against the CPU backend; the AMDGPU code generation is not (no AMD GPU here).
uint zrt_host_group_id(uint dim);
uint zrt_host_item_id(uint dim);
void zrt_host_barrier(void);
#define __builtin_amdgcn_workgroup_id_x() zrt_host_group_id(0)
#define __builtin_amdgcn_workgroup_id_y() zrt_host_group_id(1)
#define __builtin_amdgcn_workgroup_id_z() zrt_host_group_id(2)
#define __builtin_amdgcn_workitem_id_x() zrt_host_item_id(0)
#define __builtin_amdgcn_workitem_id_y() zrt_host_item_id(1)
#define __builtin_amdgcn_workitem_id_z() zrt_host_item_id(2)
#define __builtin_amdgcn_s_barrier() zrt_host_barrier()
// (one thread runs the items: the fences around a barrier have nothing to order)
#define __builtin_amdgcn_fence(order, scope) ((void)0)
