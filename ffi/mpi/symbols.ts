/**
 * The symbol table of MPI in MPICH's ABI (`libmpich.so.12`; Intel MPI and MVAPICH share it): every function
 * dcomm calls, with its C declaration from MPICH 4.0.2's `mpi_proto.h`. Handles are C `int`s (i32). Data
 * buffers are `"pointer"` so that `MPI_IN_PLACE` (`(void *)-1`) can be passed; the caller keeps the
 * array behind each pointer alive until MPI is done with it. Out-parameters are `"buffer"` (an Int32Array).
 * Every function returns an MPI error code (`int`, 0 = `MPI_SUCCESS`) unless noted.
 *
 * @module
 */

/** The symbols bound from MPI, each parameter commented with its C declaration. */
export const MPI_SYMBOLS = {
  MPI_Init_thread: {
    // int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
    parameters: [
      "pointer", // int *argc (NULL: MPI-2 and later accept it)
      "pointer", // char ***argv (NULL)
      "i32", // int required
      "buffer", // int *provided
    ],
    result: "i32",
  },
  MPI_Initialized: {
    // int MPI_Initialized(int *flag);
    parameters: [
      "buffer", // int *flag
    ],
    result: "i32",
  },
  MPI_Finalized: {
    // int MPI_Finalized(int *flag);
    parameters: [
      "buffer", // int *flag
    ],
    result: "i32",
  },
  MPI_Finalize: {
    // int MPI_Finalize(void);
    parameters: [],
    result: "i32",
  },
  MPI_Abort: {
    // int MPI_Abort(MPI_Comm comm, int errorcode);
    parameters: [
      "i32", // MPI_Comm comm
      "i32", // int errorcode
    ],
    result: "i32",
  },
  MPI_Query_thread: {
    // int MPI_Query_thread(int *provided);
    parameters: [
      "buffer", // int *provided
    ],
    result: "i32",
  },
  MPI_Is_thread_main: {
    // int MPI_Is_thread_main(int *flag);
    parameters: [
      "buffer", // int *flag
    ],
    result: "i32",
  },
  MPI_Get_library_version: {
    // int MPI_Get_library_version(char *version, int *resultlen);  (callable before MPI_Init)
    parameters: [
      "buffer", // char *version (MPI_MAX_LIBRARY_VERSION_STRING bytes)
      "buffer", // int *resultlen
    ],
    result: "i32",
  },
  MPI_Get_version: {
    // int MPI_Get_version(int *version, int *subversion);  (callable before MPI_Init)
    parameters: [
      "buffer", // int *version
      "buffer", // int *subversion
    ],
    result: "i32",
  },
  MPI_Error_string: {
    // int MPI_Error_string(int errorcode, char *string, int *resultlen);
    parameters: [
      "i32", // int errorcode
      "buffer", // char *string (MPI_MAX_ERROR_STRING bytes)
      "buffer", // int *resultlen
    ],
    result: "i32",
  },
  MPI_Error_class: {
    // int MPI_Error_class(int errorcode, int *errorclass);
    parameters: [
      "i32", // int errorcode
      "buffer", // int *errorclass
    ],
    result: "i32",
  },
  MPI_Wtime: {
    // double MPI_Wtime(void);  (returns seconds, not an error code)
    parameters: [],
    result: "f64",
  },
  MPI_Comm_rank: {
    // int MPI_Comm_rank(MPI_Comm comm, int *rank);
    parameters: [
      "i32", // MPI_Comm comm
      "buffer", // int *rank
    ],
    result: "i32",
  },
  MPI_Comm_size: {
    // int MPI_Comm_size(MPI_Comm comm, int *size);
    parameters: [
      "i32", // MPI_Comm comm
      "buffer", // int *size
    ],
    result: "i32",
  },
  MPI_Comm_split: {
    // int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm);
    parameters: [
      "i32", // MPI_Comm comm
      "i32", // int color (MPI_UNDEFINED: this process gets MPI_COMM_NULL)
      "i32", // int key (orders the ranks of the new communicator)
      "buffer", // MPI_Comm *newcomm
    ],
    result: "i32",
  },
  MPI_Comm_free: {
    // int MPI_Comm_free(MPI_Comm *comm);
    parameters: [
      "buffer", // MPI_Comm *comm (set to MPI_COMM_NULL)
    ],
    result: "i32",
  },
  MPI_Comm_set_errhandler: {
    // int MPI_Comm_set_errhandler(MPI_Comm comm, MPI_Errhandler errhandler);
    parameters: [
      "i32", // MPI_Comm comm
      "i32", // MPI_Errhandler errhandler
    ],
    result: "i32",
  },
  MPI_Allreduce: {
    // int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
    //                   MPI_Comm comm);
    parameters: [
      "pointer", // const void *sendbuf (MPI_IN_PLACE)
      "pointer", // void *recvbuf
      "i32", // int count
      "i32", // MPI_Datatype datatype
      "i32", // MPI_Op op
      "i32", // MPI_Comm comm
    ],
    result: "i32",
  },
  MPI_Iallreduce: {
    // int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
    //                    MPI_Comm comm, MPI_Request *request);
    parameters: [
      "pointer", // const void *sendbuf (MPI_IN_PLACE)
      "pointer", // void *recvbuf
      "i32", // int count
      "i32", // MPI_Datatype datatype
      "i32", // MPI_Op op
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Bcast: {
    // int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm);
    parameters: [
      "pointer", // void *buffer
      "i32", // int count
      "i32", // MPI_Datatype datatype
      "i32", // int root
      "i32", // MPI_Comm comm
    ],
    result: "i32",
  },
  MPI_Ibcast: {
    // int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
    //                MPI_Request *request);
    parameters: [
      "pointer", // void *buffer
      "i32", // int count
      "i32", // MPI_Datatype datatype
      "i32", // int root
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Reduce: {
    // int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
    //                int root, MPI_Comm comm);
    parameters: [
      "pointer", // const void *sendbuf (MPI_IN_PLACE at the root)
      "pointer", // void *recvbuf (significant at the root only)
      "i32", // int count
      "i32", // MPI_Datatype datatype
      "i32", // MPI_Op op
      "i32", // int root
      "i32", // MPI_Comm comm
    ],
    result: "i32",
  },
  MPI_Ireduce: {
    // int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
    //                 int root, MPI_Comm comm, MPI_Request *request);
    parameters: [
      "pointer", // const void *sendbuf (MPI_IN_PLACE at the root)
      "pointer", // void *recvbuf (significant at the root only)
      "i32", // int count
      "i32", // MPI_Datatype datatype
      "i32", // MPI_Op op
      "i32", // int root
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Allgather: {
    // int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
    //                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
    parameters: [
      "pointer", // const void *sendbuf
      "i32", // int sendcount
      "i32", // MPI_Datatype sendtype
      "pointer", // void *recvbuf
      "i32", // int recvcount (per rank)
      "i32", // MPI_Datatype recvtype
      "i32", // MPI_Comm comm
    ],
    result: "i32",
  },
  MPI_Iallgather: {
    // int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
    //                    int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
    parameters: [
      "pointer", // const void *sendbuf
      "i32", // int sendcount
      "i32", // MPI_Datatype sendtype
      "pointer", // void *recvbuf
      "i32", // int recvcount (per rank)
      "i32", // MPI_Datatype recvtype
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Igather: {
    // int MPI_Igather(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
    //                 int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request);
    parameters: [
      "pointer", // const void *sendbuf
      "i32", // int sendcount
      "i32", // MPI_Datatype sendtype
      "pointer", // void *recvbuf (significant at the root only)
      "i32", // int recvcount (per rank)
      "i32", // MPI_Datatype recvtype
      "i32", // int root
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Iscatter: {
    // int MPI_Iscatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
    //                  int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm, MPI_Request *request);
    parameters: [
      "pointer", // const void *sendbuf (significant at the root only)
      "i32", // int sendcount (per rank)
      "i32", // MPI_Datatype sendtype
      "pointer", // void *recvbuf
      "i32", // int recvcount
      "i32", // MPI_Datatype recvtype
      "i32", // int root
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Iallgatherv: {
    // int MPI_Iallgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
    //                     const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm,
    //                     MPI_Request *request);
    parameters: [
      "pointer", // const void *sendbuf
      "i32", // int sendcount
      "i32", // MPI_Datatype sendtype
      "pointer", // void *recvbuf
      "buffer", // const int recvcounts[]
      "buffer", // const int displs[]
      "i32", // MPI_Datatype recvtype
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Ireduce_scatter: {
    // int MPI_Ireduce_scatter(const void *sendbuf, void *recvbuf, const int recvcounts[], MPI_Datatype datatype,
    //                         MPI_Op op, MPI_Comm comm, MPI_Request *request);
    parameters: [
      "pointer", // const void *sendbuf
      "pointer", // void *recvbuf
      "buffer", // const int recvcounts[]
      "i32", // MPI_Datatype datatype
      "i32", // MPI_Op op
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Igatherv: {
    // int MPI_Igatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
    //                  const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
    //                  MPI_Comm comm, MPI_Request *request);
    parameters: [
      "pointer", // const void *sendbuf
      "i32", // int sendcount
      "i32", // MPI_Datatype sendtype
      "pointer", // void *recvbuf (significant at the root only)
      "buffer", // const int recvcounts[]
      "buffer", // const int displs[]
      "i32", // MPI_Datatype recvtype
      "i32", // int root
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Iscatterv: {
    // int MPI_Iscatterv(const void *sendbuf, const int sendcounts[], const int displs[], MPI_Datatype sendtype,
    //                   void *recvbuf, int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm,
    //                   MPI_Request *request);
    parameters: [
      "pointer", // const void *sendbuf (significant at the root only)
      "buffer", // const int sendcounts[]
      "buffer", // const int displs[]
      "i32", // MPI_Datatype sendtype
      "pointer", // void *recvbuf
      "i32", // int recvcount
      "i32", // MPI_Datatype recvtype
      "i32", // int root
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Ialltoallv: {
    // int MPI_Ialltoallv(const void *sendbuf, const int sendcounts[], const int sdispls[],
    //                    MPI_Datatype sendtype, void *recvbuf, const int recvcounts[], const int rdispls[],
    //                    MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
    parameters: [
      "pointer", // const void *sendbuf
      "buffer", // const int sendcounts[]
      "buffer", // const int sdispls[]
      "i32", // MPI_Datatype sendtype
      "pointer", // void *recvbuf
      "buffer", // const int recvcounts[]
      "buffer", // const int rdispls[]
      "i32", // MPI_Datatype recvtype
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Reduce_scatter_block: {
    // int MPI_Reduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype,
    //                              MPI_Op op, MPI_Comm comm);
    parameters: [
      "pointer", // const void *sendbuf
      "pointer", // void *recvbuf
      "i32", // int recvcount (per rank)
      "i32", // MPI_Datatype datatype
      "i32", // MPI_Op op
      "i32", // MPI_Comm comm
    ],
    result: "i32",
  },
  MPI_Ireduce_scatter_block: {
    // int MPI_Ireduce_scatter_block(const void *sendbuf, void *recvbuf, int recvcount, MPI_Datatype datatype,
    //                               MPI_Op op, MPI_Comm comm, MPI_Request *request);
    parameters: [
      "pointer", // const void *sendbuf
      "pointer", // void *recvbuf
      "i32", // int recvcount (per rank)
      "i32", // MPI_Datatype datatype
      "i32", // MPI_Op op
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Alltoall: {
    // int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
    //                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm);
    parameters: [
      "pointer", // const void *sendbuf
      "i32", // int sendcount (per rank)
      "i32", // MPI_Datatype sendtype
      "pointer", // void *recvbuf
      "i32", // int recvcount (per rank)
      "i32", // MPI_Datatype recvtype
      "i32", // MPI_Comm comm
    ],
    result: "i32",
  },
  MPI_Ialltoall: {
    // int MPI_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
    //                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request *request);
    parameters: [
      "pointer", // const void *sendbuf
      "i32", // int sendcount (per rank)
      "i32", // MPI_Datatype sendtype
      "pointer", // void *recvbuf
      "i32", // int recvcount (per rank)
      "i32", // MPI_Datatype recvtype
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Barrier: {
    // int MPI_Barrier(MPI_Comm comm);
    parameters: [
      "i32", // MPI_Comm comm
    ],
    result: "i32",
  },
  MPI_Ibarrier: {
    // int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request);
    parameters: [
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Isend: {
    // int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
    //               MPI_Request *request);
    parameters: [
      "pointer", // const void *buf
      "i32", // int count
      "i32", // MPI_Datatype datatype
      "i32", // int dest
      "i32", // int tag
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Irecv: {
    // int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
    //               MPI_Request *request);
    parameters: [
      "pointer", // void *buf
      "i32", // int count
      "i32", // MPI_Datatype datatype
      "i32", // int source
      "i32", // int tag
      "i32", // MPI_Comm comm
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Test: {
    // int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status);
    parameters: [
      "buffer", // MPI_Request *request (set to MPI_REQUEST_NULL once complete)
      "buffer", // int *flag
      "pointer", // MPI_Status *status (MPI_STATUS_IGNORE)
    ],
    result: "i32",
  },
  MPI_Wait: {
    // int MPI_Wait(MPI_Request *request, MPI_Status *status);
    parameters: [
      "buffer", // MPI_Request *request
      "pointer", // MPI_Status *status (MPI_STATUS_IGNORE)
    ],
    result: "i32",
  },
  MPI_Cancel: {
    // int MPI_Cancel(MPI_Request *request);
    parameters: [
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Test_cancelled: {
    // int MPI_Test_cancelled(const MPI_Status *status, int *flag);
    parameters: [
      "pointer", // const MPI_Status *status
      "buffer", // int *flag
    ],
    result: "i32",
  },
  MPI_Request_free: {
    // int MPI_Request_free(MPI_Request *request);
    parameters: [
      "buffer", // MPI_Request *request
    ],
    result: "i32",
  },
  MPI_Get_count: {
    // int MPI_Get_count(const MPI_Status *status, MPI_Datatype datatype, int *count);
    parameters: [
      "pointer", // const MPI_Status *status
      "i32", // MPI_Datatype datatype
      "buffer", // int *count
    ],
    result: "i32",
  },
  MPI_Reduce_local: {
    // int MPI_Reduce_local(const void *inbuf, void *inoutbuf, int count, MPI_Datatype datatype, MPI_Op op);
    parameters: [
      "buffer", // const void *inbuf
      "buffer", // void *inoutbuf (inoutbuf = inbuf op inoutbuf)
      "i32", // int count
      "i32", // MPI_Datatype datatype
      "i32", // MPI_Op op
    ],
    result: "i32",
  },
  MPI_Op_create: {
    // int MPI_Op_create(MPI_User_function *user_fn, int commute, MPI_Op *op);
    // typedef void (MPI_User_function)(void *invec, void *inoutvec, int *len, MPI_Datatype *datatype);
    parameters: [
      "function", // MPI_User_function *user_fn
      "i32", // int commute
      "buffer", // MPI_Op *op
    ],
    result: "i32",
  },
  MPI_Op_free: {
    // int MPI_Op_free(MPI_Op *op);
    parameters: [
      "buffer", // MPI_Op *op (set to MPI_OP_NULL)
    ],
    result: "i32",
  },
} as const satisfies Deno.ForeignLibraryInterface;

/** The definition of an `MPI_User_function`, for `Deno.UnsafeCallback`. */
export const MPI_USER_FUNCTION = {
  // void MPI_User_function(void *invec, void *inoutvec, int *len, MPI_Datatype *datatype);
  parameters: [
    "pointer", // void *invec
    "pointer", // void *inoutvec (the result goes here: inoutvec = invec op inoutvec)
    "pointer", // int *len
    "pointer", // MPI_Datatype *datatype
  ],
  result: "void",
} as const satisfies Deno.UnsafeCallbackDefinition;
