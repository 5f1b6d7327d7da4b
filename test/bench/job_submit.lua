-- Baseline for test/bench/bench-submit: job_submit/lua doing the same alias
-- mapping as job_submit/planc (typed tier name -> canonical QoS, unknown
-- names refused), so the two plugins are compared doing the same work.
local canonical = {
  ["p0-lease"] = "p0-lease", ["p0"] = "p0-lease", ["plan-a-lease"] = "p0-lease", ["lease"] = "p0-lease",
  ["p1-guaranteed"] = "p1-guaranteed", ["p1"] = "p1-guaranteed", ["plan-b-guaranteed"] = "p1-guaranteed", ["guaranteed"] = "p1-guaranteed",
  ["p2-spot"] = "p2-spot", ["p2"] = "p2-spot", ["plan-a-spot"] = "p2-spot", ["elastic"] = "p2-spot",
  ["p3-spot"] = "p3-spot", ["p3"] = "p3-spot", ["plan-b-spot"] = "p3-spot", ["batch"] = "p3-spot",
}

function slurm_job_submit(job_desc, part_list, submit_uid)
  if job_desc.qos ~= nil then
    local c = canonical[string.lower(job_desc.qos)]
    if c == nil then
      slurm.log_user("unknown tier '%s' in --qos", job_desc.qos)
      return slurm.ERROR
    end
    job_desc.qos = c
  end
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
